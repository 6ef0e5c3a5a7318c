//! Text that comes from a file (tensor names, metadata strings, chat
//! templates, finding messages quoting them) made safe to show: control,
//! bidirectional-override and zero-width characters escaped so they cannot
//! move, hide or recolour what is around them, and long text truncated.
//! The JSON report keeps the text intact; only what a person reads is
//! escaped. [`skeleton`] maps a name to the form it looks like, so two
//! names that display alike can be flagged.

use std::borrow::Cow;

/// Longest piece of file text shown in a line of text output or a label.
pub const SHOWN_CHARS: usize = 200;

/// Characters that change how text around them is shown without being
/// visible themselves: bidirectional embeddings, overrides, isolates and
/// marks, zero-width spaces and joiners, the word joiner and the BOM, soft
/// hyphen and other format characters commonly used to hide text.
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{FFF0}'..='\u{FFF8}'
        | '\u{E0000}'..='\u{E007F}')
}

/// `s` as it may be shown: every control or invisible character written as
/// `\u{…}` (`\n`, `\t`, `\r` and `\\` as such where they would otherwise be
/// ambiguous), cut to `max` characters with a note of how many more there
/// were. Borrowed when nothing needed changing.
pub fn shown(s: &str, max: usize) -> Cow<'_, str> {
    escape(s, max, false)
}

/// As [`shown`], for multi-line text shown as such (a chat template): line
/// breaks and tabs are kept, every other control or invisible character is
/// escaped.
pub fn shown_lines(s: &str, max: usize) -> Cow<'_, str> {
    escape(s, max, true)
}

fn escape(s: &str, max: usize, lines: bool) -> Cow<'_, str> {
    let kept = |c: char| lines && (c == '\n' || c == '\t');
    let clean = !s
        .chars()
        .any(|c| (c.is_control() && !kept(c)) || is_invisible(c));
    let count = s.chars().count();
    if clean && count <= max {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len().min(max * 4) + 16);
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push_str(&format!("… ({} more characters)", count - max));
            break;
        }
        match c {
            c if kept(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\\' if !clean => out.push_str("\\\\"),
            c if c.is_control() || is_invisible(c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The look of a name: invisible characters dropped, and letters that look
/// like ASCII letters (Cyrillic, Greek, full-width forms, dotless i, …)
/// folded to them; case and digits are left as they are (they look different). Two different names with the same skeleton display alike.
pub fn skeleton(s: &str) -> Cow<'_, str> {
    // Every invisible or folded character is outside ASCII.
    if s.is_ascii() {
        return Cow::Borrowed(s);
    }
    s.chars()
        .filter(|&c| !is_invisible(c))
        .map(|c| {
            match c {
                // Full-width ASCII.
                '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
                'а' | 'α' => 'a',
                'А' | 'Α' => 'A',
                'В' | 'Β' => 'B',
                'с' | 'ϲ' => 'c',
                'С' | 'Ϲ' => 'C',
                'ԁ' => 'd',
                'е' => 'e',
                'Е' | 'Ε' => 'E',
                'һ' => 'h',
                'Н' | 'Η' => 'H',
                'і' | 'ı' | 'ι' => 'i',
                'І' | 'Ι' | 'Ӏ' => 'I',
                'ј' => 'j',
                'Ј' => 'J',
                'К' | 'Κ' => 'K',
                'ӏ' => 'l',
                'М' | 'Μ' => 'M',
                'Ν' => 'N',
                'о' | 'ο' => 'o',
                'О' | 'Ο' => 'O',
                'р' | 'ρ' => 'p',
                'Р' | 'Ρ' => 'P',
                'ԛ' => 'q',
                'ѕ' => 's',
                'Ѕ' => 'S',
                'Т' | 'Τ' => 'T',
                'ս' => 'u',
                'ν' | 'ѵ' => 'v',
                'ԝ' => 'w',
                'х' => 'x',
                'Х' | 'Χ' => 'X',
                'у' => 'y',
                'У' | 'Υ' => 'Y',
                'Ζ' => 'Z',
                '‐' | '‑' | '‒' | '–' | '—' | '−' => '-',
                '․' | '·' | '•' => '.',
                '⁄' | '∕' => '/',
                c => c,
            }
        })
        .collect::<String>()
        .into()
}

/// Pairs of distinct names that display alike (same [`skeleton`]), first
/// occurrence with each later one; at most `max` pairs.
pub fn lookalikes<'a>(
    names: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Vec<(&'a str, &'a str)> {
    let names: Vec<&'a str> = names.into_iter().collect();
    // An ASCII name is its own skeleton: among ASCII names alone, two
    // different names never look alike (a 20,000-tensor index need not be
    // hashed while its table waits).
    if names.iter().all(|n| n.is_ascii()) {
        return Vec::new();
    }
    let mut seen: foldhash::HashMap<Cow<'a, str>, &'a str> = foldhash::HashMap::default();
    let mut out = Vec::new();
    for n in names {
        // Only names that hold something a skeleton changes can collide
        // with another name; plain lower-case ASCII needs no entry.
        let key = skeleton(n);
        match seen.get(&key) {
            Some(&first) if first != n => {
                out.push((first, n));
                if out.len() >= max {
                    break;
                }
            }
            Some(_) => {}
            None => {
                seen.insert(key, n);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_bidi_and_zero_width_are_escaped() {
        let s = "a\u{202E}b\u{200B}c\x1b[31md\ne";
        assert_eq!(shown(s, 100), "a\\u{202e}b\\u{200b}c\\u{1b}[31md\\ne");
        assert!(matches!(shown("plain.name", 100), Cow::Borrowed(_)));
        // A backslash is doubled only where escapes were added.
        assert_eq!(shown("a\\b", 100), "a\\b");
        assert_eq!(shown("a\\b\u{7}", 100), "a\\\\b\\u{7}");
        assert_eq!(
            shown_lines("{% if %}\n\tx\u{202E}y\r", 100),
            "{% if %}\n\tx\\u{202e}y\\r"
        );
    }

    #[test]
    fn long_text_is_cut_with_a_count() {
        let s = "x".repeat(100_000);
        let out = shown(&s, 200);
        assert!(out.starts_with(&"x".repeat(200)));
        assert!(
            out.ends_with("… (99800 more characters)"),
            "{}",
            &out[190..]
        );
    }

    #[test]
    fn lookalike_names_are_paired() {
        let names = [
            "model.layers.0.weight",
            "model.layers.0.weight\u{200B}",
            "modеl.layers.1.weight", // Cyrillic е
            "model.layers.1.weight",
            "model.layers.2.weight",
        ];
        let pairs = lookalikes(names.iter().copied(), 10);
        assert_eq!(pairs, vec![(names[0], names[1]), (names[2], names[3]),]);
    }
}
