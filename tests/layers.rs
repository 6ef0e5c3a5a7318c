//! The layering of `src/` (README, Architecture): a module imports only the
//! layers below it, so there is no import circle and the bottom never
//! depends on the faces. Test code (after a file's first `#[cfg(test)]`,
//! and `tests.rs` files) may use anything, the sample writer above all.

use std::path::Path;

/// Each top-level module of the library and its layer, bottom first.
const LAYERS: &[(&str, u32)] = &[
    ("util", 0),
    ("finding", 0),
    ("format", 1),
    ("decode", 2),
    ("signing", 2),
    ("audit", 3),
    ("report", 4),
    ("sample", 4),
    ("mlx", 4),
    ("spotcheck", 5),
    ("diff", 5),
    ("app", 6),
];

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `crate::<module>` references in the non-test part of `text`.
fn imports(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        found.push(name);
    }
    // `use crate::{a, b::c}` groups.
    let mut rest = code;
    while let Some(i) = rest.find("crate::{") {
        rest = &rest[i + "crate::{".len()..];
        let group = &rest[..rest.find('}').unwrap_or(0)];
        for part in group.split(',') {
            let name: String = part
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
    }
    found.retain(|n| !n.is_empty());
    found
}

#[test]
fn no_module_imports_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    let mut seen_modules = std::collections::BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if matches!(top.as_str(), "lib" | "main" | "cli") || rel.ends_with("tests.rs") {
            continue; // the crate root, and the binary (which uses `bundlescope::`)
        }
        seen_modules.insert(top.clone());
        let Some(own) = layer(&top) else {
            wrong.push(format!(
                "{}: module {top} has no layer in tests/layers.rs",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for m in imports(&text) {
            if m == top || m.chars().next().is_some_and(|c| c.is_uppercase()) {
                continue; // itself, or a crate-root constant (TOOL_VERSION)
            }
            match layer(&m) {
                Some(l) if l < own => {}
                Some(l) => wrong.push(format!(
                    "{}: {top} (layer {own}) imports {m} (layer {l})",
                    rel.display()
                )),
                None => wrong.push(format!("{}: imports unknown module {m}", rel.display())),
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
    assert!(seen_modules.contains("format") && seen_modules.contains("audit"));
}

#[test]
fn the_checker_sees_imports() {
    let text = "use crate::audit::Event;\nuse crate::{format, decode::x};\n#[cfg(test)]\nuse crate::sample;";
    let mut got = imports(text);
    got.sort();
    assert_eq!(got, ["audit", "decode", "format"]);
}
