//! The comparison as Markdown (`diff --markdown`), built from the report's
//! Markdown blocks so escaping and the provenance chain are the audit's.

use std::fmt::Write as _;

use super::{DiffReport, Status, TensorDiff};
use crate::report::markdown::{ChainNode, Fact, Table, chain_md, code, short_name, text};

/// The word for a status.
pub fn status_text(s: Status) -> &'static str {
    match s {
        Status::Changed => "changed",
        Status::OnlyA => "only in A",
        Status::OnlyB => "only in B",
        Status::Identical => "identical",
    }
}

/// The chain of a comparison: bundle A, then bundle B, each with its
/// manifest hash.
pub fn diff_chain(r: &DiffReport) -> Vec<ChainNode> {
    let node = |role: &str, side: &super::SideRef, link: Option<String>| ChainNode {
        role: role.into(),
        name: side.path.clone(),
        mark: None,
        link,
        facts: vec![
            Fact {
                label: "format".into(),
                value: side.format.clone(),
                mark: None,
            },
            Fact {
                label: "manifest SHA-256".into(),
                value: side.manifest_sha256.clone(),
                mark: None,
            },
        ],
    };
    let s = &r.summary;
    vec![
        node("bundle A", &r.a, None),
        node(
            "bundle B",
            &r.b,
            Some(format!(
                "tensors matched by name and compared by range hash: {} identical, {} changed, {} only in A, {} only in B",
                s.identical, s.changed, s.only_a, s.only_b
            )),
        ),
    ]
}

/// Non-zero code deltas, most frequent first, at most `n` of them.
fn deltas_text(t: &TensorDiff, n: usize) -> String {
    let Some(c) = &t.codes else {
        return String::new();
    };
    let mut v: Vec<(i32, u64)> = c
        .delta_counts
        .iter()
        .filter(|(d, k)| **d != 0 && **k > 0)
        .map(|(d, k)| (*d, *k))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let more = v.len().saturating_sub(n);
    let mut s = v
        .iter()
        .take(n)
        .map(|(d, k)| format!("{d:+}: {k}"))
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        let _ = write!(s, ", … {more} more");
    }
    s
}

/// The comparison as Markdown: summary, provenance chain, the table of
/// every tensor that is not identical, then the identical ones.
pub fn diff_markdown(r: &DiffReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# bundlescope diff: {} → {}\n",
        text(&short_name(&r.a.path)),
        text(&short_name(&r.b.path))
    );
    out.push_str("## Summary\n\n");
    let s = &r.summary;
    let mut t = Table::new(&["status", "tensors>"]);
    for (k, v) in [
        ("identical", s.identical),
        ("changed", s.changed),
        ("only in A", s.only_a),
        ("only in B", s.only_b),
    ] {
        t.row(vec![k.into(), v.to_string()]);
    }
    t.render(&mut out);

    out.push_str("## Provenance\n\n");
    chain_md(&diff_chain(r), &mut out);

    out.push_str("## Differences\n\n");
    // The expert column only for stacked experts (NVFP4).
    let experts = r.tensors.iter().any(|d| d.expert.is_some());
    let mut columns = vec![
        "status",
        "tensor",
        "expert>",
        "differs",
        "codes changed>",
        "code deltas (B − A)",
        "scale B/A min / median / max",
        "weight rel. error>",
        "worst row>",
    ];
    if !experts {
        columns.remove(2);
    }
    let mut t = Table::new(&columns);
    for d in r.tensors.iter().filter(|d| d.status != Status::Identical) {
        let ratio = |v: Option<f64>| v.map_or("—".into(), |x| format!("{x:.4}"));
        let mut cells = vec![
            status_text(d.status).into(),
            text(&d.name),
            d.expert.map_or(String::new(), |e| e.to_string()),
            d.differs.join(", "),
            d.codes.as_ref().map_or(String::new(), |c| {
                format!("{:.4}%", c.changed_share * 100.0)
            }),
            deltas_text(d, 4),
            d.scales.as_ref().map_or(String::new(), |s| {
                format!(
                    "{} / {} / {}",
                    ratio(s.min_ratio),
                    ratio(s.median_ratio),
                    ratio(s.max_ratio)
                )
            }),
            d.weight_rel_err
                .map_or(String::new(), |e| format!("{e:.3e}")),
            d.worst_row.as_ref().map_or(String::new(), |w| {
                format!(
                    "{} ({})",
                    w.row,
                    w.rel_err.map_or("∞".into(), |e| format!("{e:.2e}"))
                )
            }),
        ];
        if !experts {
            cells.remove(2);
        }
        t.row(cells);
    }
    if t.is_empty() {
        out.push_str("No differences: every tensor is identical.\n\n");
    } else {
        t.render(&mut out);
    }

    out.push_str("## Identical tensors\n\n");
    let mut t = Table::new(&["tensor", "precision", "sha256"]);
    for d in r.tensors.iter().filter(|d| d.status == Status::Identical) {
        let side = d.a.as_ref();
        t.row(vec![
            text(&d.name),
            side.map_or(String::new(), |s| text(&s.precision)),
            side.and_then(|s| s.sha256.as_deref())
                .map_or(String::new(), code),
        ]);
    }
    if t.is_empty() {
        out.push_str("None.\n\n");
    } else {
        t.render(&mut out);
    }
    out
}
