//! Names and text from the file: tensor names with control characters, a
//! bidirectional override (U+202E), zero-width characters, look-alike
//! letters or 100 KB of length are escaped and cut in the text output and
//! the app, kept byte for byte in the JSON report, and names that display
//! alike are flagged (names.confusable). Invalid UTF-8 is a finding.

mod common;

use std::fs;
use std::path::Path;

const BIDI: &str = "evil\u{202E}thgiew.proj";
const ESC: &str = "layer\u{1b}[31m.red";
const ZW_A: &str = "model.norm.weight";
const ZW_B: &str = "model.norm.weight\u{200B}";
const CY_A: &str = "model.embed.weight";
const CY_B: &str = "mod\u{0435}l.embed.weight"; // Cyrillic е

fn long_name() -> String {
    format!("long.{}", "x".repeat(100_000))
}

fn names() -> Vec<String> {
    vec![
        BIDI.into(),
        ESC.into(),
        ZW_A.into(),
        ZW_B.into(),
        CY_A.into(),
        CY_B.into(),
        long_name(),
    ]
}

/// A safetensors checkpoint of one F32 [2] tensor per name, written here.
fn write_checkpoint(dir: &Path) {
    let mut header = serde_json::Map::new();
    for (i, n) in names().iter().enumerate() {
        header.insert(
            n.clone(),
            serde_json::json!({"dtype": "F32", "shape": [2], "data_offsets": [i * 8, i * 8 + 8]}),
        );
    }
    let mut h = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut f = (h.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(&h);
    for i in 0..names().len() * 2 {
        f.extend_from_slice(&(i as f32).to_le_bytes());
    }
    fs::write(dir.join("model.safetensors"), f).unwrap();
}

fn assert_no_raw_hidden(what: &str, text: &str) {
    for c in ['\u{202E}', '\u{200B}', '\u{1b}'] {
        assert!(
            !text.contains(c),
            "{what}: raw U+{:04X} in the output",
            c as u32
        );
    }
    for line in text.lines() {
        assert!(
            line.chars().count() < 2000,
            "{what}: a line of {} chars",
            line.len()
        );
    }
}

#[test]
fn names_are_escaped_in_text_intact_in_json_and_lookalikes_flagged() {
    let tmp = tempfile::tempdir().unwrap();
    write_checkpoint(tmp.path());
    let dir = tmp.path().to_str().unwrap();

    let run = common::cli(&["audit", dir, "--json"]);
    assert_eq!(run.code, 0, "warnings only: {}", run.stdout);
    let r = run.json();
    let mut got: Vec<String> = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    let mut want = names();
    got.sort();
    want.sort();
    assert!(got == want, "the JSON keeps every name byte for byte");
    let flagged = common::findings_of(&r, "names.confusable");
    let tensors: Vec<&str> = flagged
        .iter()
        .map(|f| f["tensor"].as_str().unwrap())
        .collect();
    assert_eq!(flagged.len(), 2, "{flagged:#?}");
    assert!(
        tensors.contains(&ZW_B) || tensors.contains(&ZW_A),
        "{tensors:?}"
    );
    assert!(
        tensors.contains(&CY_B) || tensors.contains(&CY_A),
        "{tensors:?}"
    );
    assert!(flagged.iter().all(|f| f["severity"] == "warning"));
    let zw = flagged
        .iter()
        .find(|f| f["message"].as_str().unwrap().contains("norm"))
        .unwrap();
    assert!(
        zw["message"]
            .as_str()
            .unwrap()
            .contains("model.norm.weight\\u{200b}"),
        "the hidden character is named in the message: {zw}"
    );
    // Not flagged: names that merely share letters or differ visibly.
    assert!(!r["findings"].to_string().contains("evil"));

    for args in [vec!["audit", dir], vec!["list", dir]] {
        let run = common::cli(&args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        assert_no_raw_hidden(args[0], &run.stdout);
        if args[0] == "list" {
            assert!(
                run.stdout.contains("evil\\u{202e}thgiew.proj"),
                "{}",
                run.stdout
            );
            assert!(run.stdout.contains("layer\\u{1b}[31m.red"));
            assert!(
                run.stdout.contains("more characters)"),
                "the long name is cut"
            );
        } else {
            assert!(run.stdout.contains("model.norm.weight\\u{200b}"));
        }
    }
}

/// A GGUF tensor name that is not UTF-8 is a gguf.string finding naming
/// where it is; the text output stays readable.
#[test]
fn a_gguf_name_that_is_not_utf8_is_a_finding() {
    let mut f = b"GGUF".to_vec();
    f.extend_from_slice(&3u32.to_le_bytes());
    f.extend_from_slice(&1u64.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    let name = b"bad\xff\xfename";
    f.extend_from_slice(&(name.len() as u64).to_le_bytes());
    f.extend_from_slice(name);
    f.extend_from_slice(&1u32.to_le_bytes());
    f.extend_from_slice(&4u64.to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    f.resize(f.len().next_multiple_of(32) + 16, 0);
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("m.gguf");
    fs::write(&p, f).unwrap();
    let run = common::cli(&["audit", p.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let r = run.json();
    let hits = common::findings_of(&r, "gguf.string");
    assert!(
        hits.iter()
            .any(|h| h["message"].as_str().unwrap().contains("UTF-8")),
        "{:#}",
        r["findings"]
    );
    let text = common::cli(&["audit", p.to_str().unwrap()]);
    assert!(!text.stdout.contains('\u{fffd}') || text.stdout.contains("UTF-8"));
}

/// The app's tensor table shows the escaped names, never the raw ones.
#[cfg(feature = "gui")]
#[test]
fn the_app_shows_escaped_names() {
    let tmp = tempfile::tempdir().unwrap();
    write_checkpoint(tmp.path());
    let mut g = common::harness::gui();
    g.open(tmp.path());
    assert!(g.shows("evil\\u{202e}thgiew.proj"), "escaped bidi name");
    assert!(!g.shows(BIDI), "raw bidi name");
    assert!(
        g.shows("model.norm.weight\\u{200b}"),
        "escaped zero-width name"
    );
}
