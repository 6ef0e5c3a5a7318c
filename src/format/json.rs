//! Small typed views of JSON values that say what they found when the type
//! is wrong, so findings can print "expected X, found Y".

use serde_json::Value;

/// A short description of a JSON value's type and, for scalars, its value.
pub fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) if n.is_i64() || n.is_u64() => format!("the integer {n}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {:?}", truncate(s, 60)),
        Value::Array(a) => format!("a list of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// A non-negative JSON integer (not a float, not a boolean), or what was found.
pub fn uint(v: &Value) -> Result<u64, String> {
    match v {
        Value::Number(n) => match n.as_u64() {
            Some(x) => Ok(x),
            None if n.is_i64() => Err(format!("the negative integer {n}")),
            None => Err(kind(v)),
        },
        _ => Err(kind(v)),
    }
}

/// Cuts `s` to at most `max` characters, marking the cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}…")
    }
}

/// Most JSON values (structural tokens) bundlescope parses from one file:
/// a parsed tree costs tens of bytes a value, so 64 MiB of `[0,0,0,…]`
/// would take gigabytes. A checkpoint index at the 100,000-tensor limit, or
/// a safetensors header at its 32,768 entries, holds a few hundred thousand.
pub const MAX_VALUES: usize = 2_000_000;

/// An upper bound on the values in JSON text: the commas, colons and
/// openings outside strings, plus one. Linear, allocates nothing.
pub fn count_values(bytes: &[u8]) -> usize {
    let (mut n, mut in_string, mut escaped) = (1usize, false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b':' | b'[' | b'{' => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// Parses JSON text into a tree, refusing text with more than
/// [`MAX_VALUES`] values before anything is allocated for them.
pub fn parse_bounded(bytes: &[u8]) -> Result<Value, String> {
    let n = count_values(bytes);
    if n > MAX_VALUES {
        return Err(format!(
            "it holds about {n} JSON values, over the limit of {MAX_VALUES}"
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_counted_outside_strings_only() {
        // Independent count: the parsed tree's nodes.
        fn nodes(v: &Value) -> usize {
            1 + match v {
                Value::Array(a) => a.iter().map(nodes).sum(),
                Value::Object(o) => o.values().map(nodes).sum(),
                _ => 0,
            }
        }
        for text in [
            r#"{"a": [1, 2, {"b": "x,y:[{"}], "c\\": "q\"u,o:te", "d": null}"#,
            "[]",
            "0",
            r#"[[[]], {}, "", 7]"#,
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert!(count_values(text.as_bytes()) >= nodes(&v), "{text}");
            assert!(count_values(text.as_bytes()) <= 2 * nodes(&v) + 1, "{text}");
        }
        let many = format!("[{}0]", "0,".repeat(MAX_VALUES));
        let e = parse_bounded(many.as_bytes()).unwrap_err();
        assert!(e.contains("over the limit"), "{e}");
        assert!(parse_bounded(b"[0,1]").is_ok());
    }

    #[test]
    fn uint_refuses_floats_booleans_and_negatives() {
        assert_eq!(uint(&json!(5)), Ok(5));
        assert!(uint(&json!(5.0)).is_err());
        assert!(uint(&json!(true)).is_err());
        assert!(uint(&json!(-1)).unwrap_err().contains("negative"));
        assert!(uint(&json!("5")).unwrap_err().contains("string"));
    }

    #[test]
    fn uint_takes_two_to_the_63() {
        assert_eq!(uint(&json!(9_223_372_036_854_775_808u64)), Ok(1 << 63));
    }
}
