//! The Quality view: every packed tensor with its statistics, worst first
//! by suspicion; click a row to select the tensor.

use egui::RichText;
use egui_extras::{Column, TableBuilder};

use super::{App, Command, Commands, Session};
use crate::decode::stats::Quality;
use crate::format::Bundle;

/// Columns the quality table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QualitySort {
    /// Suspicion score (the default: worst first).
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

fn key(q: &Quality, s: QualitySort) -> f64 {
    match s {
        QualitySort::Suspicion | QualitySort::Name => q.suspicion,
        QualitySort::Entropy => q.entropy_bits,
        QualitySort::Clipping => q.clipping_share,
        QualitySort::Range => q.scale_dynamic_range,
        QualitySort::Outliers => q.outlier_rows as f64,
    }
}

/// The Quality view's own state: its sort, and its rows cached until the
/// sort or the session's statistics change.
#[derive(Default)]
pub struct QualityPanel {
    /// Sort column.
    pub sort: QualitySort,
    /// Order.
    pub ascending: bool,
    rows: Vec<(usize, Quality)>,
    key: Option<(QualitySort, bool, u64, u64)>,
}

/// The packed tensors with statistics, in display order.
pub fn quality_rows(app: &App) -> Vec<(usize, Quality)> {
    let Some(s) = app.session() else {
        return Vec::new();
    };
    rows_of(s, app.quality.sort, app.quality.ascending)
}

fn rows_of(s: &Session, sort: QualitySort, ascending: bool) -> Vec<(usize, Quality)> {
    let Some(b) = &s.model.bundle else {
        return Vec::new();
    };
    let mut rows: Vec<(usize, Quality)> = s
        .model
        .stats
        .iter()
        .enumerate()
        .filter_map(|(i, st)| Some((i, st.as_ref()?.quality.clone()?)))
        .collect();
    if sort == QualitySort::Name {
        rows.sort_by(|a, c| b.tensors[a.0].name.cmp(&b.tensors[c.0].name));
    } else {
        rows.sort_by(|a, c| key(&c.1, sort).total_cmp(&key(&a.1, sort)));
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
    let key = (panel.sort, panel.ascending, s.id, s.stats_generation);
    if panel.key != Some(key) {
        panel.rows = rows_of(s, panel.sort, panel.ascending);
        panel.key = Some(key);
    }
    let rows = &panel.rows;
    ui.label(
        RichText::new(format!(
            "{} packed tensors, worst first by suspicion (reserved codes, clipping, scale outliers, low entropy)",
            rows.len()
        ))
        .weak(),
    );
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 6.0;
    let mut clicked = None;
    TableBuilder::new(ui)
        .id_salt("quality-table")
        .striped(true)
        .sense(egui::Sense::click())
        .column(Column::remainder().at_least(160.0).clip(true))
        .columns(Column::exact(74.0), 7)
        .header(row_h, |mut h| {
            for (label, sort) in [
                ("name", Some(QualitySort::Name)),
                ("suspicion", Some(QualitySort::Suspicion)),
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
                let (i, q) = &rows[row.index()];
                row.set_selected(selected == Some(*i));
                row.col(|ui| {
                    ui.add(
                        egui::Label::new(RichText::new(&bundle.tensors[*i].name).monospace())
                            .truncate()
                            .selectable(false),
                    );
                });
                let danger = q.suspicion >= 1.0;
                row.col(|ui| {
                    let t = RichText::new(format!("{:.2}", q.suspicion));
                    ui.label(if danger {
                        t.color(ui.visuals().warn_fg_color)
                    } else {
                        t
                    });
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
