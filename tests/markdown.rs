//! `audit --markdown` and `diff --markdown`, read back through a real
//! CommonMark/GFM parser (pulldown-cmark with tables): the sections are
//! headings, the tables are tables with the right rows and columns, and a
//! hostile tensor name stays in its cell.

mod common;

use common::codes::{plain_q4, recode};
use common::nvfp4::Artifact;
use common::{TestBundle, cli};
use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// What the renderer made of a document: headings and tables, in order.
#[derive(Debug, Default)]
struct Doc {
    headings: Vec<(HeadingLevel, String)>,
    /// Each table's rows (the header first), each row its cells' text.
    tables: Vec<Vec<Vec<String>>>,
    /// The heading each table came after.
    table_sections: Vec<String>,
    /// Raw HTML the renderer would pass through.
    html: Vec<String>,
}

impl Doc {
    fn parse(md: &str) -> Self {
        let mut d = Doc::default();
        let mut heading: Option<(HeadingLevel, String)> = None;
        let mut in_cell = false;
        let mut last_h2 = String::new();
        for e in Parser::new_ext(md, Options::ENABLE_TABLES) {
            match e {
                Event::Start(Tag::Heading { level, .. }) => heading = Some((level, String::new())),
                Event::End(TagEnd::Heading(_)) => {
                    if let Some(h) = heading.take() {
                        if h.0 == HeadingLevel::H2 {
                            last_h2 = h.1.clone();
                        }
                        d.headings.push(h);
                    }
                }
                Event::Start(Tag::Table(_)) => {
                    d.tables.push(Vec::new());
                    d.table_sections.push(last_h2.clone());
                }
                Event::Start(Tag::TableHead) | Event::Start(Tag::TableRow) => {
                    d.tables.last_mut().unwrap().push(Vec::new())
                }
                Event::Start(Tag::TableCell) => {
                    in_cell = true;
                    d.tables
                        .last_mut()
                        .unwrap()
                        .last_mut()
                        .unwrap()
                        .push(String::new());
                }
                Event::End(TagEnd::TableCell) => in_cell = false,
                Event::Text(t) | Event::Code(t) => {
                    if let Some(h) = &mut heading {
                        h.1.push_str(&t);
                    } else if in_cell {
                        let row = d.tables.last_mut().unwrap().last_mut().unwrap();
                        row.last_mut().unwrap().push_str(&t);
                    }
                }
                Event::Html(h) | Event::InlineHtml(h) => d.html.push(h.to_string()),
                _ => {}
            }
        }
        d
    }

    fn h2(&self) -> Vec<&str> {
        self.headings
            .iter()
            .filter(|(l, _)| *l == HeadingLevel::H2)
            .map(|(_, t)| t.as_str())
            .collect()
    }

    /// The (single) table under section `h2`.
    fn table(&self, h2: &str) -> &Vec<Vec<String>> {
        let i = self
            .table_sections
            .iter()
            .position(|s| s == h2)
            .unwrap_or_else(|| panic!("no table under {h2}: {:?}", self.table_sections));
        &self.tables[i]
    }
}

/// Every row of every table has as many cells as its header.
fn assert_rectangular(d: &Doc) {
    for t in &d.tables {
        let n = t[0].len();
        for r in t {
            assert_eq!(r.len(), n, "row {r:?} of table with header {:?}", t[0]);
        }
    }
}

fn records(b: &TestBundle) -> usize {
    let m = b.manifest();
    m["tensors"].as_array().unwrap().len() + m["aliases"].as_object().map_or(0, |a| a.len())
}

#[test]
fn audit_markdown_of_a_sample_has_every_section_and_real_tables() {
    let b = TestBundle::v2();
    let run = cli(&["audit", b.dir.to_str().unwrap(), "--markdown"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let d = Doc::parse(&run.stdout);
    assert_eq!(d.headings[0].0, HeadingLevel::H1);
    assert!(d.headings[0].1.starts_with("bundlescope audit: bundle"));
    assert_eq!(
        d.h2(),
        [
            "Signature",
            "Verdict",
            "Findings",
            "Provenance",
            "Totals by precision",
            "Tensors"
        ]
    );
    assert!(run.stdout.contains("**VALID**: 0 errors"), "{}", run.stdout);
    assert!(
        run.stdout.contains("**unsigned (no model.sig)**"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("No findings."));
    assert!(d.html.is_empty(), "no raw HTML: {:?}", d.html);
    assert_rectangular(&d);

    // Totals: one row per precision, then "all".
    let m = b.manifest();
    let mut precisions: Vec<&str> = m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["precision"].as_str().unwrap())
        .collect();
    precisions.sort_unstable();
    precisions.dedup();
    let totals = d.table("Totals by precision");
    assert_eq!(totals[0].len(), 6);
    assert_eq!(totals.len(), 1 + precisions.len() + 1);
    let listed: Vec<&str> = totals[1..=precisions.len()]
        .iter()
        .map(|r| r[0].as_str())
        .collect();
    assert_eq!(listed, precisions);
    assert_eq!(totals.last().unwrap()[0], "all");
    assert_eq!(
        totals.last().unwrap()[1],
        m["tensors"].as_array().unwrap().len().to_string()
    );

    // Tensors: one row per index entry, names verbatim in the first cell.
    let tensors = d.table("Tensors");
    assert_eq!(tensors[0].len(), 7, "no range hashes unless asked for");
    assert_eq!(tensors.len(), 1 + records(&b));
    let first = m["tensors"][0]["name"].as_str().unwrap();
    assert_eq!(tensors[1][0], first);

    // With --range-hashes, each row's range hash: the record's bytes hashed here.
    let run = cli(&[
        "audit",
        b.dir.to_str().unwrap(),
        "--markdown",
        "--range-hashes",
    ]);
    assert_eq!(run.code, 0);
    let d = Doc::parse(&run.stdout);
    let tensors = d.table("Tensors");
    assert_eq!(tensors[0][7], "range sha256");
    let rec = &m["tensors"][0];
    let (off, len) = (
        rec["offset"].as_u64().unwrap() as usize,
        rec["bytes"].as_u64().unwrap() as usize,
    );
    let payload = std::fs::read(b.payload()).unwrap();
    let want = common::hex(&<sha2::Sha256 as sha2::Digest>::digest(
        &payload[off..off + len],
    ));
    assert_eq!(tensors[1][7], want);

    // Provenance: the manifest hash and the weights file, verified.
    let sha = common::hex(&<sha2::Sha256 as sha2::Digest>::digest(
        std::fs::read(b.dir.join("manifest.json")).unwrap(),
    ));
    assert!(run.stdout.contains(&format!("manifest SHA-256: `{sha}`")));
    assert!(run.stdout.contains("weights.bin SHA-256"));
    assert!(run.stdout.contains("(✔ verified)"));
    assert!(
        run.stdout
            .contains("language_model.model.embed_tokens.weight"),
        "intra-word underscores stay unescaped in the raw text"
    );
}

#[test]
fn a_hostile_tensor_name_stays_in_its_cell() {
    let b = TestBundle::v2();
    let old = plain_q4(&b)[0].clone();
    let hostile = "evil|name `x` <b>bold</b> *y* [z](u) $m$\nsecond | line";
    b.edit(|m| {
        for r in m["tensors"].as_array_mut().unwrap() {
            if r["name"] == old.as_str() {
                r["name"] = hostile.into();
            }
        }
    });
    // A finding names it too: one scale of the tensor zeroed.
    let at = b.record(hostile)["scales_offset"].as_u64().unwrap() as usize;
    b.patch_payload(true, |p| p[at..at + 2].copy_from_slice(&0u16.to_le_bytes()));
    let run = cli(&["audit", b.dir.to_str().unwrap(), "--markdown"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let d = Doc::parse(&run.stdout);
    assert_rectangular(&d);
    assert!(d.html.is_empty(), "no raw HTML: {:?}", d.html);
    // The newline is the only thing that changes: it becomes a space.
    let shown = hostile.replace('\n', " ");
    let tensors = d.table("Tensors");
    assert_eq!(tensors.len(), 1 + records(&b));
    assert_eq!(
        tensors.iter().filter(|r| r[0] == shown).count(),
        1,
        "{tensors:?}"
    );
    let findings = d.table("Findings");
    assert_eq!(findings[0][1], "tensor");
    assert_eq!(findings.len(), 2);
    assert_eq!(findings[1][1], shown);
    assert_eq!(findings[1][0], "error");
    assert!(
        d.headings
            .iter()
            .any(|(l, t)| *l == HeadingLevel::H3 && t == "packed.scales (1)"),
        "{:?}",
        d.headings
    );
}

#[test]
fn diff_markdown_lists_the_changed_tensor_and_keeps_exit_codes() {
    let a = TestBundle::v2();
    let b = TestBundle::v2();
    let name = plain_q4(&b)[0].clone();
    recode(&b, &name, 20);
    let (pa, pb) = (a.dir.to_str().unwrap(), b.dir.to_str().unwrap());
    let run = cli(&["diff", pa, pb, "--markdown"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let d = Doc::parse(&run.stdout);
    assert_rectangular(&d);
    assert_eq!(
        d.h2(),
        ["Summary", "Provenance", "Differences", "Identical tensors"]
    );
    let n = records(&a);
    let summary = d.table("Summary");
    assert_eq!(summary[1], ["identical", &(n - 1).to_string()]);
    assert_eq!(summary[2], ["changed", "1"]);
    let diffs = d.table("Differences");
    assert_eq!(diffs[0].len(), 8, "no expert column without experts");
    assert_eq!(diffs.len(), 2, "{diffs:?}");
    assert_eq!(diffs[1][0], "changed");
    assert_eq!(diffs[1][1], name);
    assert_eq!(diffs[1][2], "codes, values");
    // The share as --json gives it.
    let json = cli(&["diff", pa, pb, "--json"]).json();
    let row = json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["status"] == "changed")
        .unwrap();
    let share = row["codes"]["changed_share"].as_f64().unwrap();
    assert_eq!(diffs[1][3], format!("{:.4}%", share * 100.0));
    assert_eq!(d.table("Identical tensors").len(), n);
    assert!(run.stdout.contains("bundle A"));
    assert!(run.stdout.contains("bundle B"));

    // Exit codes are --fail-on's, whatever the output.
    let fail = cli(&["diff", pa, pb, "--markdown", "--fail-on", "changed"]);
    assert_eq!(fail.code, 1);
    assert!(fail.stdout.contains("## Differences"));
    let same = cli(&["diff", pa, pa, "--markdown", "--fail-on", "any"]);
    assert_eq!(same.code, 0);
    assert!(same.stdout.contains("No differences"));
}

#[test]
fn json_and_markdown_are_exclusive() {
    let b = TestBundle::v2();
    let p = b.dir.to_str().unwrap();
    for args in [
        vec!["audit", p, "--json", "--markdown"],
        vec!["diff", p, p, "--markdown", "--json"],
    ] {
        let run = cli(&args);
        assert_eq!(run.code, 2, "{args:?}");
        assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
        assert!(run.stdout.is_empty());
    }
}

#[test]
fn audit_markdown_of_an_unreadable_bundle_still_has_a_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let run = cli(&["audit", tmp.path().to_str().unwrap(), "--markdown"]);
    assert_eq!(run.code, 2);
    let d = Doc::parse(&run.stdout);
    assert!(d.h2().contains(&"Verdict"));
    assert!(run.stdout.contains("**ERROR**"));
    assert!(
        d.headings.iter().any(|(_, t)| t.starts_with("bundle.open")),
        "{:?}",
        d.headings
    );
}

#[test]
fn diff_markdown_of_nvfp4_names_the_changed_expert() {
    let a = Artifact::sample();
    let b = Artifact::sample();
    let weight = "model.decoder.layers.0.experts.down_proj.weight";
    let (header, _) = Artifact::header(&b.shard_of(weight));
    let shape: Vec<usize> = header[weight]["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let per = shape[1] * shape[2] * 8 / 2;
    // Flip one sign bit in expert 1's codes.
    b.patch(weight, |d| d[per + 3] ^= 0x08);
    let run = cli(&[
        "diff",
        a.dir.to_str().unwrap(),
        b.dir.to_str().unwrap(),
        "--markdown",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let d = Doc::parse(&run.stdout);
    assert_rectangular(&d);
    let diffs = d.table("Differences");
    assert_eq!(diffs[0][2], "expert");
    assert_eq!(diffs.len(), 2, "{diffs:?}");
    assert_eq!((diffs[1][1].as_str(), diffs[1][2].as_str()), (weight, "1"));
}
