//! The Quality view: every packed tensor with its statistics, worst first
//! by its score against its peers (tensors of the same role in the other
//! layers) with the reason; the selected tensor's scales over its peers'
//! median, and the layers × role heat map (`peer_view`). Click a row or a
//! cell to select the tensor.

use egui::RichText;
use egui_extras::{Column, TableBuilder};

use std::collections::{HashMap, HashSet};

use super::{App, Command, Commands, Session};
use crate::decode::peers::{Feature, PeerVerdict};
use crate::decode::stats::Quality;
use crate::finding::checks;
use crate::format::Bundle;

/// Columns the quality table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QualitySort {
    /// Score against the peers (the default: worst first).
    #[default]
    Suspicion,
    /// Name.
    Name,
    /// Entropy.
    Entropy,
    /// Clipping share.
    Clipping,
    /// Scale dynamic range.
    Range,
    /// Outlier rows.
    Outliers,
}

fn key(q: &Quality, v: &PeerVerdict, s: QualitySort) -> f64 {
    match s {
        QualitySort::Suspicion | QualitySort::Name => v.score,
        QualitySort::Entropy => q.entropy_bits,
        QualitySort::Clipping => q.clipping_share,
        QualitySort::Range => q.scale_dynamic_range,
        QualitySort::Outliers => q.outlier_rows as f64,
    }
}

/// One row of the Quality view: the tensor, its statistics and its
/// standing among its peers.
pub type QualityRow = (usize, Quality, PeerVerdict);

/// The Quality view's own state: its sort, its rows and the peer verdicts
/// cached until the sort or the session's statistics, findings or range
/// hashes change, and the heat map's statistic.
#[derive(Default)]
pub struct QualityPanel {
    /// Sort column.
    pub sort: QualitySort,
    /// Order.
    pub ascending: bool,
    /// The heat map's statistic (None: the score).
    pub heat_stat: Option<Feature>,
    rows: Vec<QualityRow>,
    verdicts: Vec<Option<PeerVerdict>>,
    key: Option<(QualitySort, bool, u64, u64, usize, usize)>,
}

/// The packed tensors with statistics, in display order (worst first by
/// the score against their peers, unless another sort is picked).
pub fn quality_rows(app: &App) -> Vec<QualityRow> {
    let Some(s) = app.session() else {
        return Vec::new();
    };
    let v = verdicts_of(s);
    rows_of(s, &v, app.quality.sort, app.quality.ascending)
}

/// Byte-identical pairs `(tensor, earlier twin)`: the tensors the audit
/// warned of (`tensor.duplicate`), their twins found by range hash once the
/// app has hashed the ranges.
fn twins(s: &Session, b: &Bundle) -> Vec<(usize, usize)> {
    let dup: HashSet<&str> = s
        .model
        .findings
        .iter()
        .filter(|f| f.check == checks::TENSOR_DUPLICATE)
        .filter_map(|f| f.tensor.as_deref())
        .collect();
    if dup.is_empty() {
        return Vec::new();
    }
    let mut first: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, h) in s.model.range_hashes.iter().enumerate() {
        let Some(h) = h else { continue };
        match first.get(h.as_str()) {
            Some(&j) => {
                if b.tensors
                    .get(i)
                    .is_some_and(|t| dup.contains(t.name.as_str()))
                {
                    out.push((i, j));
                }
            }
            None => {
                first.insert(h.as_str(), i);
            }
        }
    }
    out
}

fn verdicts_of(s: &Session) -> Vec<Option<PeerVerdict>> {
    let Some(b) = &s.model.bundle else {
        return Vec::new();
    };
    crate::report::peers::verdicts(b, &s.model.stats, &twins(s, b))
}

fn rows_of(
    s: &Session,
    verdicts: &[Option<PeerVerdict>],
    sort: QualitySort,
    ascending: bool,
) -> Vec<QualityRow> {
    let Some(b) = &s.model.bundle else {
        return Vec::new();
    };
    let mut rows: Vec<QualityRow> = s
        .model
        .stats
        .iter()
        .enumerate()
        .filter_map(|(i, st)| {
            let v = verdicts.get(i).cloned().flatten().unwrap_or_default();
            Some((i, *st.as_ref()?.quality.clone()?, v))
        })
        .collect();
    if sort == QualitySort::Name {
        rows.sort_by(|a, c| b.tensors[a.0].name.cmp(&b.tensors[c.0].name));
    } else {
        rows.sort_by(|a, c| {
            key(&c.1, &c.2, sort)
                .total_cmp(&key(&a.1, &a.2, sort))
                .then_with(|| b.tensors[a.0].name.cmp(&b.tensors[c.0].name))
        });
    }
    if ascending {
        rows.reverse();
    }
    rows
}

/// Draws the Quality view.
pub(super) fn quality_ui(
    ui: &mut egui::Ui,
    panel: &mut QualityPanel,
    s: &Session,
    bundle: &Bundle,
    selected: Option<usize>,
    tx: &mut Commands,
) {
    let hashed = s.model.range_hashes.iter().filter(|h| h.is_some()).count();
    let key = (
        panel.sort,
        panel.ascending,
        s.id,
        s.stats_generation,
        s.model.findings.len(),
        hashed,
    );
    if panel.key != Some(key) {
        panel.verdicts = verdicts_of(s);
        panel.rows = rows_of(s, &panel.verdicts, panel.sort, panel.ascending);
        panel.key = Some(key);
    }
    ui.label(
        RichText::new(format!(
            "{} packed tensors, worst first by their score against their peers (the same role in the other layers); 1 or more is worth a look",
            panel.rows.len()
        ))
        .weak(),
    );
    if let Some(i) = selected {
        super::peer_view::against_peers_ui(ui, s, bundle, i, &panel.verdicts);
    }
    super::peer_view::heat_ui(
        ui,
        &mut panel.heat_stat,
        bundle,
        &panel.verdicts,
        selected,
        tx,
    );
    let rows = &panel.rows;
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 6.0;
    let mut clicked = None;
    TableBuilder::new(ui)
        .id_salt("quality-table")
        .striped(true)
        .sense(egui::Sense::click())
        .column(Column::initial(300.0).at_least(160.0).clip(true))
        .column(Column::exact(54.0))
        .column(Column::remainder().at_least(160.0).clip(true))
        .columns(Column::exact(64.0), 6)
        .header(row_h, |mut h| {
            for (label, sort) in [
                ("name", Some(QualitySort::Name)),
                ("score", Some(QualitySort::Suspicion)),
                ("why", None),
                ("entropy", Some(QualitySort::Entropy)),
                ("clipped", Some(QualitySort::Clipping)),
                ("unused", None),
                ("zero grp", None),
                ("range", Some(QualitySort::Range)),
                ("outliers", Some(QualitySort::Outliers)),
            ] {
                h.col(|ui| {
                    let arrow = if sort == Some(panel.sort) {
                        if panel.ascending { " ⏶" } else { " ⏷" }
                    } else {
                        ""
                    };
                    let r = ui.add(
                        egui::Button::new(RichText::new(format!("{label}{arrow}")).strong())
                            .frame(false),
                    );
                    if let Some(s) = sort
                        && r.clicked()
                    {
                        if panel.sort == s {
                            panel.ascending = !panel.ascending;
                        } else {
                            panel.sort = s;
                            panel.ascending = false;
                        }
                    }
                });
            }
        })
        .body(|body| {
            body.rows(row_h, rows.len(), |mut row| {
                let (i, q, v) = &rows[row.index()];
                row.set_selected(selected == Some(*i));
                row.col(|ui| {
                    ui.add(
                        egui::Label::new(RichText::new(&bundle.tensors[*i].name).monospace())
                            .truncate()
                            .selectable(false),
                    )
                    .on_hover_text(format!("peer group: {} ({} peers)", v.peer_group, v.peers));
                });
                let danger = v.score >= 1.0;
                row.col(|ui| {
                    let t = RichText::new(format!("{:.2}", v.score));
                    ui.label(if danger {
                        t.color(ui.visuals().warn_fg_color)
                    } else {
                        t
                    });
                });
                row.col(|ui| {
                    ui.add(
                        egui::Label::new(RichText::new(&v.reason).small())
                            .truncate()
                            .selectable(false),
                    );
                });
                row.col(|ui| {
                    ui.label(format!("{:.2}", q.entropy_bits));
                });
                row.col(|ui| {
                    ui.label(format!("{:.2}%", q.clipping_share * 100.0));
                });
                row.col(|ui| {
                    ui.label(q.unused_levels.len().to_string());
                });
                row.col(|ui| {
                    ui.label(q.zero_groups.to_string());
                });
                row.col(|ui| {
                    ui.label(format!("{:.1}", q.scale_dynamic_range));
                });
                row.col(|ui| {
                    ui.label(q.outlier_rows.to_string());
                });
                if row.response().clicked() {
                    clicked = Some(*i);
                }
            });
        });
    if let Some(i) = clicked {
        tx.send(Command::Select(Some(i)));
    }
}
