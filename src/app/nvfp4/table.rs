//! The per-expert table: global scale and E4M3 statistics per expert,
//! sortable, the worst one highlighted.

use egui::{RichText, Sense};
use egui_extras::{Column, TableBuilder};

use super::{ExpertSort, Nvfp4View, median, most_extreme, short_number};
use crate::decode::stats::E4m3Stats;

struct Row {
    expert: usize,
    cells: [Option<f64>; 5],
}

/// Draws the per-expert table of one set.
pub(super) fn table_ui(
    ui: &mut egui::Ui,
    view: &mut Nvfp4View,
    id: &str,
    experts: usize,
    globals: Option<&[f64]>,
    e4: Option<&E4m3Stats>,
) {
    let rows: Vec<Row> = (0..experts)
        .map(|e| {
            let x = e4.and_then(|s| s.experts.get(e));
            Row {
                expert: e,
                cells: [
                    globals.and_then(|g| g.get(e)).copied(),
                    x.map(|x| x.mean),
                    x.map(|x| x.max),
                    x.map(|x| x.zero_share),
                    x.map(|x| x.nan as f64),
                ],
            }
        })
        .collect();
    // The worst of each column: global and mean farthest from their median,
    // max, zero share and NaN the largest (when above zero).
    let column = |c: usize| rows.iter().map(|r| r.cells[c]).collect::<Vec<_>>();
    // The largest, when it stands above the median (all equal: none).
    let largest = |c: usize| {
        let m = median(rows.iter().filter_map(|r| r.cells[c]).collect());
        rows.iter()
            .filter_map(|r| Some((r.expert, r.cells[c].filter(|v| *v > m.max(0.0))?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(e, _)| e)
    };
    let worst = [
        most_extreme(&column(0), true),
        most_extreme(&column(1), true),
        largest(2),
        largest(3),
        largest(4),
    ];
    let sort = view.sort;
    let key = |r: &Row| {
        match sort {
            ExpertSort::Expert => Some(r.expert as f64),
            ExpertSort::Global => r.cells[0],
            ExpertSort::Mean => r.cells[1],
            ExpertSort::Max => r.cells[2],
            ExpertSort::Zero => r.cells[3],
            ExpertSort::Nan => r.cells[4],
        }
        .unwrap_or(f64::NAN)
    };
    let mut order: Vec<&Row> = rows.iter().collect();
    order.sort_by(|a, b| key(a).total_cmp(&key(b)));
    if !view.ascending {
        order.reverse();
    }
    let warn = ui.visuals().warn_fg_color;
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
    let mut picked = None;
    let headers = [
        ("#", ExpertSort::Expert),
        ("global", ExpertSort::Global),
        ("mean", ExpertSort::Mean),
        ("max", ExpertSort::Max),
        ("zero", ExpertSort::Zero),
        ("NaN", ExpertSort::Nan),
    ];
    ui.push_id(format!("{id}-table"), |ui| {
        TableBuilder::new(ui)
            .striped(true)
            .sense(Sense::click())
            .max_scroll_height(200.0)
            .cell_layout(egui::Layout::left_to_right(egui::Align::Center))
            .column(Column::exact(36.0))
            .columns(Column::auto().at_least(48.0), 4)
            .column(Column::remainder().at_least(30.0))
            .header(row_h, |mut h| {
                for (label, col) in headers {
                    h.col(|ui| {
                        let arrow = match (view.sort == col, view.ascending) {
                            (false, _) => "",
                            (true, true) => " ⏶",
                            (true, false) => " ⏷",
                        };
                        if ui
                            .add(
                                egui::Button::new(
                                    RichText::new(format!("{label}{arrow}")).strong(),
                                )
                                .frame(false),
                            )
                            .on_hover_text(format!(
                                "Sort by {}",
                                if label == "#" { "expert" } else { label }
                            ))
                            .clicked()
                        {
                            if view.sort == col {
                                view.ascending = !view.ascending;
                            } else {
                                view.sort = col;
                                view.ascending = col == ExpertSort::Expert;
                            }
                        }
                    });
                }
            })
            .body(|body| {
                body.rows(row_h, order.len(), |mut row| {
                    let r = order[row.index()];
                    row.set_selected(view.expert == Some(r.expert));
                    row.col(|ui| {
                        ui.label(r.expert.to_string());
                    });
                    for (c, v) in r.cells.iter().enumerate() {
                        row.col(|ui| {
                            let text = match (c, v) {
                                (_, None) => "—".to_string(),
                                (3, Some(v)) => format!("{:.2}%", v * 100.0),
                                (4, Some(v)) => format!("{v}"),
                                (_, Some(v)) => short_number(*v, false),
                            };
                            let mut text = RichText::new(text).monospace();
                            if worst[c] == Some(r.expert) {
                                text = text.color(warn).strong();
                            }
                            ui.add(egui::Label::new(text).selectable(false))
                                .on_hover_text(if worst[c] == Some(r.expert) {
                                    "the most extreme of this column"
                                } else {
                                    "click to pick this expert"
                                });
                        });
                    }
                    if row.response().clicked() {
                        picked = Some(r.expert);
                    }
                });
            });
    });
    if let Some(e) = picked {
        view.expert = Some(e);
    }
}
