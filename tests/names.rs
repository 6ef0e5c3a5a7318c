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

/// The same checkpoint with every value changed (so `diff` lists every
/// tensor as changed).
fn write_changed_checkpoint(dir: &Path) {
    write_checkpoint(dir);
    let p = dir.join("model.safetensors");
    let mut f = fs::read(&p).unwrap();
    let data = f.len() - names().len() * 8;
    for (i, w) in f[data..].chunks_exact_mut(4).enumerate() {
        w.copy_from_slice(&(i as f32 + 0.5).to_le_bytes());
    }
    fs::write(p, f).unwrap();
}

/// A GGUF v3 file of one Q8_0 [32] tensor per hostile name (no key/values),
/// laid out here from the format's rules, so `hist --all` ranks them.
fn write_gguf(path: &Path) {
    let mut f = b"GGUF".to_vec();
    f.extend_from_slice(&3u32.to_le_bytes());
    f.extend_from_slice(&(names().len() as u64).to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    for (i, n) in names().iter().enumerate() {
        f.extend_from_slice(&(n.len() as u64).to_le_bytes());
        f.extend_from_slice(n.as_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&32u64.to_le_bytes());
        f.extend_from_slice(&8u32.to_le_bytes()); // Q8_0
        f.extend_from_slice(&(i as u64 * 64).to_le_bytes());
    }
    f.resize(f.len().next_multiple_of(32), 0);
    for i in 0..names().len() {
        let mut block = half::f16::from_f32(0.01 * (i + 1) as f32)
            .to_le_bytes()
            .to_vec();
        block.extend((0..32).map(|k| ((k * 7 + i) % 255) as u8 ^ 0x80));
        block.resize(64, 0);
        f.extend_from_slice(&block);
    }
    fs::write(path, f).unwrap();
}

/// Asserts the text shows the hostile names escaped (the bidi and escape
/// names as `\u{…}`, the long one cut), however the output lays them out.
fn assert_escaped(what: &str, text: &str, backslash: &str) {
    assert_no_raw_hidden(what, text);
    // Markdown shows a control character as U+FFFD, the text output names it.
    let esc = if backslash == "\\\\" {
        "layer\u{FFFD}".to_string()
    } else {
        format!("layer{backslash}u{{1b}}")
    };
    for want in [format!("evil{backslash}u{{202e}}thgiew.proj"), esc] {
        assert!(text.contains(&want), "{what}: no {want:?} in:\n{text}");
    }
    assert!(
        text.contains("more characters)"),
        "{what}: the long name is cut"
    );
}

#[test]
fn hist_diff_and_markdown_escape_names_and_json_keeps_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    write_checkpoint(&a);
    write_changed_checkpoint(&b);
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());

    // hist --tensor: every name's own page.
    for n in names() {
        let run = common::cli(&["hist", a, "--tensor", &n]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_no_raw_hidden("hist --tensor", &run.stdout);
        let json = common::cli(&["hist", a, "--tensor", &n, "--json"]).json();
        assert_eq!(json["tensor"].as_str(), Some(n.as_str()), "JSON intact");
    }
    let run = common::cli(&["hist", a, "--tensor", BIDI]);
    assert!(
        run.stdout.starts_with("evil\\u{202e}thgiew.proj\n"),
        "{}",
        run.stdout
    );

    // hist --all ranks GGUF Q8_0 tensors of the same names.
    let gguf = tmp.path().join("m.gguf");
    write_gguf(&gguf);
    let g = gguf.to_str().unwrap();
    let run = common::cli(&["hist", g, "--all"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_escaped("hist --all", &run.stdout, "\\");
    let json = common::cli(&["hist", g, "--all", "--json"]).json();
    let mut got: Vec<String> = json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tensor"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    let mut want = names();
    want.sort();
    assert!(got == want, "hist --all --json keeps every name");
    // The GGUF audit flags the look-alikes too.
    let r = common::cli(&["audit", g, "--json"]).json();
    assert_eq!(common::findings_of(&r, "names.confusable").len(), 2);

    // list and diff, text.
    let run = common::cli(&["list", a]);
    assert_escaped("list", &run.stdout, "\\");
    let run = common::cli(&["diff", a, b]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_escaped("diff", &run.stdout, "\\");
    assert!(run.stdout.contains("model.norm.weight\\u{200b}"));
    let json = common::cli(&["diff", a, b, "--json"]).json();
    let names_in = |v: &serde_json::Value| {
        let mut n: Vec<String> = v["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    assert!(names_in(&json) == want, "diff --json keeps every name");

    // Markdown: escaped as in the text, the backslash itself escaped for
    // Markdown (it renders as `\u{202e}`).
    let run = common::cli(&["diff", a, b, "--markdown"]);
    assert_escaped("diff --markdown", &run.stdout, "\\\\");
    let run = common::cli(&["audit", a, "--markdown"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_escaped("audit --markdown", &run.stdout, "\\\\");
    assert!(
        run.stdout.contains("names.confusable"),
        "the look-alike finding is in the Markdown report"
    );
}

/// An error message quoting names from the file (an unknown tensor
/// answered with the closest names) is escaped on stderr as well.
#[test]
fn error_messages_escape_names() {
    let tmp = tempfile::tempdir().unwrap();
    write_checkpoint(tmp.path());
    let run = common::cli(&[
        "hist",
        tmp.path().to_str().unwrap(),
        "--tensor",
        "evil\u{202E}thgiew.pro",
    ]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(
        run.stderr.contains("evil\\u{202e}thgiew.proj"),
        "the closest name, escaped: {}",
        run.stderr
    );
    assert_no_raw_hidden("hist --tensor (unknown)", &run.stderr);
}
