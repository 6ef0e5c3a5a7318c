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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
