//! The report as Markdown, for pasting into a review: `audit --markdown`,
//! "Save report…" as `.md`, and (through the same building blocks)
//! `diff --markdown`. GitHub-flavoured: pipe tables, headings, lists.
//!
//! Everything a bundle supplies (tensor names, messages, paths, manifest
//! strings) goes through [`text`], which escapes every character Markdown
//! or a table gives meaning to, so a hostile tensor name cannot end a cell,
//! open a code span, start HTML or break a line.

use std::fmt::Write as _;

use super::{Report, Totals, human_bytes};
use crate::audit::Severity;

/// Escapes `s` as plain inline text: the punctuation that means something
/// inside a line is backslash-escaped (a `|` cannot end a table cell, a
/// backtick cannot open a code span, `*`/`_`/`~` cannot emphasise, `[`
/// cannot start a link, `<` cannot start HTML or an autolink, `&` cannot
/// start an entity, `$` cannot start GitHub's math), line breaks and tabs
/// become spaces and other control characters U+FFFD, so the text stays on
/// its line and in its cell; invisible characters (U+202E, zero-width) are
/// written as `\u{…}` and text past 800 characters is cut, as in the text
/// output. Callers never start a line with such text, so
/// the line-start markers (`#`, `-`, `1.`) need no escaping; an `_`
/// between two letters or digits cannot emphasise and stays as it is.
pub fn text(s: &str) -> String {
    const MAX: usize = 4 * crate::util::text::SHOWN_CHARS;
    let mut out = String::with_capacity(s.len().min(4 * MAX) + 8);
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if i == MAX {
            out.push_str(&format!("… ({} more characters)", chars.len() - MAX));
            break;
        }
        match c {
            // Between two letters or digits `_` can neither open nor close
            // emphasis: `embed_tokens` stays readable in the raw text.
            '_' if i > 0
                && chars[i - 1].is_alphanumeric()
                && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric()) =>
            {
                out.push(c)
            }
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '<' | '>' | '~' | '&' | '$' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => out.push('\u{FFFD}'),
            // Not controls, but they reorder or hide what is around them:
            // named, as in the text output (the backslash itself escaped).
            c if crate::util::text::is_invisible(c) => {
                out.push_str(&format!("\\\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

/// A code span for text the tool itself wrote (check ids, hashes, numbers):
/// no escaping needed, but a stray backtick still falls back to [`text`].
pub fn code(s: &str) -> String {
    if s.is_empty() {
        return String::new();
    }
    if s.chars()
        .any(|c| c == '`' || c == '|' || c == '\\' || c.is_control())
    {
        return text(s);
    }
    format!("`{s}`")
}

/// A GitHub pipe table. Cells are written as given: escape bundle-supplied
/// text with [`text`] first.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    /// `true` right-aligns the column (numbers).
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles (written escaped); a title ending
    /// in `>` is right-aligned (the `>` is dropped).
    pub fn new(columns: &[&str]) -> Self {
        let mut header = Vec::new();
        let mut right = Vec::new();
        for c in columns {
            match c.strip_suffix('>') {
                Some(t) => {
                    header.push(text(t));
                    right.push(true);
                }
                None => {
                    header.push(text(c));
                    right.push(false);
                }
            }
        }
        Self {
            header,
            right,
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are left empty, extra ones dropped.
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
    }

    /// Rows so far.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No rows yet?
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table, ending in a blank line.
    pub fn render(&self, out: &mut String) {
        let line = |out: &mut String, cells: &[String]| {
            out.push('|');
            for c in cells {
                // An empty cell still needs content for some renderers.
                let c = if c.is_empty() { " " } else { c.as_str() };
                let _ = write!(out, " {c} |");
            }
            out.push('\n');
        };
        line(out, &self.header);
        out.push('|');
        for &r in &self.right {
            out.push_str(if r { "---:|" } else { "---|" });
        }
        out.push('\n');
        for r in &self.rows {
            line(out, r);
        }
        out.push('\n');
    }
}

pub use super::lineage::Mark;

/// A mark's word with its symbol, as the chain shows it.
fn shown(m: Mark) -> &'static str {
    match m {
        Mark::Verified => "✔ verified",
        Mark::Mismatch => "✖ mismatch",
        Mark::Unknown => "unknown",
    }
}

/// One fact of a chain node: a label, a value (a hash, a path) and,
/// when it was checked, how that went.
#[derive(Debug, Clone)]
pub struct Fact {
    /// What it is ("manifest SHA-256", "weights.bin SHA-256").
    pub label: String,
    /// Its value, as text (escaped on output).
    pub value: String,
    /// Whether it was checked, when that applies.
    pub mark: Option<Mark>,
}

/// One node of the provenance chain: a source revision, a parent bundle,
/// this bundle, a compared bundle. The chain is a list of these, oldest
/// first, so a format with more links (an overlay's parent) only adds nodes.
#[derive(Debug, Clone)]
pub struct ChainNode {
    /// Its role ("source revision", "this bundle", "bundle B").
    pub role: String,
    /// What identifies it (a revision, a path).
    pub name: String,
    /// Overall mark of the node, when it was checked against something.
    pub mark: Option<Mark>,
    /// How it links to the node before it (the checks that tie them), if
    /// anything does.
    pub link: Option<String>,
    /// Its hashes and other facts.
    pub facts: Vec<Fact>,
}

/// The chain as an ordered list, one node per item with its facts nested.
pub fn chain_md(nodes: &[ChainNode], out: &mut String) {
    if nodes.is_empty() {
        out.push_str("No provenance recorded.\n\n");
        return;
    }
    for (i, n) in nodes.iter().enumerate() {
        let _ = writeln!(
            out,
            "{}. **{}**: {}{}",
            i + 1,
            text(&n.role),
            if n.name.is_empty() {
                "—".to_string()
            } else {
                text(&n.name)
            },
            n.mark.map_or(String::new(), |m| format!(" ({})", shown(m)))
        );
        if let Some(l) = &n.link {
            let _ = writeln!(out, "    - linked by: {}", text(l));
        }
        for f in &n.facts {
            let value = if f.value.len() == 64 && f.value.bytes().all(|b| b.is_ascii_hexdigit()) {
                code(&f.value)
            } else {
                text(&f.value)
            };
            let _ = write!(out, "    - {}: {value}", text(&f.label));
            if let Some(m) = f.mark {
                let _ = write!(out, " ({})", shown(m));
            }
            out.push('\n');
        }
    }
    out.push('\n');
}

/// The chain of an audit report, as the Lineage tab draws it
/// ([`super::lineage::Chain`]): the source revision, an overlay's parent,
/// this bundle, each with its hashes and marks and the checks that link it
/// to the node before.
pub fn audit_chain(r: &Report) -> Vec<ChainNode> {
    use super::lineage::{Chain, NodeKind};
    let chain = Chain::of_report(r, None);
    chain
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind != NodeKind::Compared)
        .map(|(i, n)| ChainNode {
            role: n.title.clone(),
            name: n.subtitle.clone(),
            mark: Some(n.mark),
            link: i.checked_sub(1).and_then(|k| chain.links.get(k)).map(|l| {
                let checks: Vec<String> = l
                    .checks
                    .iter()
                    .map(|c| format!("{} {}", c.check, c.mark.text()))
                    .collect();
                if checks.is_empty() {
                    l.label.clone()
                } else {
                    format!("{} ({})", l.label, checks.join(", "))
                }
            }),
            facts: n
                .hashes
                .iter()
                .map(|h| Fact {
                    label: h.label.clone(),
                    value: h.value.clone().unwrap_or_else(|| "unknown".into()),
                    mark: Some(h.mark),
                })
                .collect(),
        })
        .collect()
}

/// Totals by precision as a table.
pub fn totals_md(t: &Totals, out: &mut String) {
    let mut table = Table::new(&[
        "precision",
        "tensors>",
        "parameters>",
        "bytes>",
        "resident>",
        "bits/weight>",
    ]);
    let bpw = |b: Option<f64>| b.map_or("—".into(), |b| format!("{b:.2}"));
    for (name, v) in &t.by_precision {
        table.row(vec![
            text(name),
            v.tensors.to_string(),
            v.parameters.to_string(),
            human_bytes(v.bytes),
            human_bytes(v.resident_bytes),
            bpw(v.bits_per_weight),
        ]);
    }
    table.row(vec![
        "**all**".into(),
        t.tensors.to_string(),
        t.parameters.to_string(),
        human_bytes(t.bytes),
        human_bytes(t.resident_bytes),
        bpw(t.bits_per_weight),
    ]);
    table.render(out);
    if t.aliases > 0 {
        let _ = writeln!(out, "{} (not counted).\n", super::aliases_line(t.aliases));
    }
    let mut table = Table::new(&["stored dtype", "tensors>", "parameters>", "bytes>"]);
    for (name, v) in &t.by_dtype {
        table.row(vec![
            code(name),
            v.tensors.to_string(),
            v.parameters.to_string(),
            human_bytes(v.bytes),
        ]);
    }
    table.render(out);
}

/// The folder's last component, for a title.
pub fn short_name(path: &str) -> String {
    let p = std::path::Path::new(path);
    let p = if p.file_name().is_some_and(|n| n == "manifest.json") {
        p.parent().unwrap_or(p)
    } else {
        p
    };
    p.file_name()
        .map_or_else(|| path.to_string(), |n| n.to_string_lossy().into_owned())
}

/// The audit report as Markdown: verdict, findings grouped by check,
/// provenance chain, totals by precision, the tensor table.
pub fn audit_markdown(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# bundlescope audit: {}\n",
        text(&short_name(&r.bundle.path))
    );
    let _ = writeln!(
        out,
        "bundle {} · format {} · {} {}\n",
        text(&r.bundle.path),
        r.bundle.format.as_deref().map_or("unknown".into(), code),
        text(r.tool.name),
        text(r.tool.version),
    );

    signature_md(r, &mut out);

    out.push_str("## Verdict\n\n");
    let count = |s: Severity| r.findings.iter().filter(|f| f.severity == s).count();
    let _ = writeln!(
        out,
        "**{}**: {} errors, {} warnings, {} notes{}\n",
        r.verdict.to_uppercase(),
        count(Severity::Error),
        count(Severity::Warning),
        r.findings.len() - count(Severity::Error) - count(Severity::Warning),
        r.duration_s
            .map_or(String::new(), |d| format!(", audited in {d:.2} s")),
    );

    out.push_str("## Findings\n\n");
    findings_md(r, &mut out);

    out.push_str("## Provenance\n\n");
    chain_md(&audit_chain(r), &mut out);

    out.push_str("## Totals by precision\n\n");
    totals_md(&r.totals, &mut out);

    out.push_str("## Tensors\n\n");
    tensors_md(r, &mut out);
    out
}

/// Findings grouped by check id (in registry order of first appearance),
/// one table per check.
fn findings_md(r: &Report, out: &mut String) {
    if r.findings.is_empty() {
        out.push_str("No findings.\n\n");
        return;
    }
    let mut groups: Vec<(String, Vec<&crate::audit::Finding>)> = Vec::new();
    for f in &r.findings {
        let id = f.check.to_string();
        match groups.iter_mut().find(|(g, _)| *g == id) {
            Some((_, v)) => v.push(f),
            None => groups.push((id, vec![f])),
        }
    }
    // Errors first, then by id.
    let worst = |v: &[&crate::audit::Finding]| v.iter().map(|f| f.severity).min();
    groups.sort_by(|(a, va), (b, vb)| worst(va).cmp(&worst(vb)).then_with(|| a.cmp(b)));
    for (id, fs) in groups {
        let _ = writeln!(out, "### {} ({})\n", code(&id), fs.len());
        let mut t = Table::new(&["severity", "tensor", "field", "offset>", "message"]);
        for f in fs {
            t.row(vec![
                f.severity.as_str().to_string(),
                f.tensor.as_deref().map_or(String::new(), text),
                f.field.as_deref().map_or(String::new(), text),
                f.offset.map_or(String::new(), |o| o.to_string()),
                text(&f.message),
            ]);
        }
        t.render(out);
    }
}

fn tensors_md(r: &Report, out: &mut String) {
    if r.tensors.is_empty() {
        out.push_str("No tensors (the bundle could not be read).\n\n");
        return;
    }
    // Range hashes are there only when asked for (`--range-hashes`).
    let hashes = r.tensors.iter().any(|t| t.sha256.is_some());
    let mut columns = vec![
        "tensor",
        "precision",
        "shape",
        "dtype",
        "offset>",
        "bytes>",
        "findings>",
    ];
    if hashes {
        columns.push("range sha256");
    }
    let mut t = Table::new(&columns);
    for row in &r.tensors {
        let info = &row.info;
        let name = match &info.alias_of {
            Some(target) => format!("{} → {}", text(&info.name), text(target)),
            None => text(&info.name),
        };
        let findings = r
            .findings
            .iter()
            .filter(|f| f.tensor.as_deref() == Some(info.name.as_str()))
            .count();
        t.row(vec![
            name,
            text(info.precision.as_str()),
            text(&info.shape_text()),
            info.source_dtype.as_deref().map_or(String::new(), text),
            info.offset.map_or(String::new(), |o| o.to_string()),
            info.bytes.map_or(String::new(), |b| b.to_string()),
            findings.to_string(),
            row.sha256.as_deref().map_or(String::new(), code),
        ]);
    }
    t.render(out);
}

/// The signature section a review leads with.
fn signature_md(r: &Report, out: &mut String) {
    out.push_str("## Signature\n\n");
    let head = crate::report::lineage::signature_headline(r.signature.as_ref());
    let _ = writeln!(out, "**{}**\n", text(&head));
    let Some(s) = &r.signature else { return };
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "- {k}: {v}");
    };
    row(
        "method",
        s.method
            .map_or("unreadable".into(), |m| m.name().to_string()),
    );
    row(
        "verified",
        if s.verified {
            "yes".into()
        } else {
            "**no**".into()
        },
    );
    if let Some(v) = &s.key_fingerprint {
        let against = match &s.key_hint {
            Some(h) if h.eq_ignore_ascii_case(v) => " (the key the bundle names)",
            Some(_) => " (**not** the key the bundle names)",
            None => "",
        };
        row("key fingerprint", format!("{}{against}", code(v)));
    }
    if let Some(v) = &s.key_hint {
        row("key the bundle names (hint or its own key)", code(v));
    }
    if let Some(v) = &s.certificate_subject {
        row("certificate subject", text(v));
    }
    if let Some([from, to]) = &s.certificate_validity {
        row(
            "certificate valid",
            format!("{} to {}", text(from), text(to)),
        );
    }
    for t in &s.signing_times {
        row("signed at", text(t));
    }
    if let Some(v) = &s.identity {
        row("identity", text(v));
    }
    if let Some(v) = &s.issuer {
        row("issuer", text(v));
    }
    if let Some(v) = &s.serialization {
        row("serialization", text(v));
    }
    row(
        "resources",
        format!("{} signed, {} files checked", s.resources, s.files_checked),
    );
    if !s.unsigned_files.is_empty() {
        row("unsigned files", text(&s.unsigned_files.join(", ")));
    }
    for n in &s.not_verified {
        row("not verified", text(n));
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_escapes_what_markdown_and_tables_read() {
        assert_eq!(text("a|b"), "a\\|b");
        assert_eq!(text("`x`"), "\\`x\\`");
        assert_eq!(text("<script>"), "\\<script\\>");
        assert_eq!(text("l1\nl2\r\tz"), "l1 l2  z");
        assert_eq!(text("a\u{0}b"), "a\u{FFFD}b");
        assert_eq!(text("plain.name.0"), "plain.name.0");
        assert_eq!(text("a\u{202E}b\u{200B}"), "a\\\\u{202e}b\\\\u{200b}");
        let long = text(&"x".repeat(100_000));
        assert!(
            long.ends_with("… (99200 more characters)"),
            "{}",
            &long[790..]
        );
        assert_eq!(
            text("embed_tokens _x_ y_ 1_2"),
            "embed_tokens \\_x\\_ y\\_ 1_2"
        );
    }

    #[test]
    fn code_falls_back_to_text_on_a_backtick() {
        assert_eq!(code("packed.scales"), "`packed.scales`");
        assert_eq!(code("a`b"), "a\\`b");
    }

    #[test]
    fn table_rows_have_every_column() {
        let mut t = Table::new(&["a", "n>"]);
        t.row(vec!["x".into()]);
        let mut s = String::new();
        t.render(&mut s);
        assert_eq!(s, "| a | n |\n|---|---:|\n| x |   |\n\n");
    }
}
