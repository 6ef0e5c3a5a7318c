//! The Lineage tab: the open bundle's provenance chain (source revision →
//! parent bundle, for a calibrated GPTQ-Q4 overlay → this bundle → a
//! compared bundle), drawn as boxes joined by arrows, each box with its
//! hashes and a verified / mismatch / unknown mark, each arrow with the
//! checks that tie its ends. The chain itself is
//! [`crate::report::lineage::Chain`], plain data the report renders too.

use std::path::PathBuf;

use egui::{Color32, RichText, Stroke};

use super::{Command, Commands, Session};
use crate::report::lineage::{Chain, Compared, Inputs, Link, Mark, Node};

/// The Lineage tab's state.
#[derive(Default)]
pub struct LineageView {
    /// The bundle the open one was compared with; the chain ends in "no
    /// bundle compared" while this is `None`. Set by whoever compares,
    /// through [`LineageView::set_compared`].
    compared: Option<Compared>,
    /// The parent folder picked for the open overlay (audited with it).
    pub(super) parent: Option<PathBuf>,
    /// The chain, rebuilt only when the session, its generation or the
    /// compared bundle change.
    cache: Option<((u64, u64), Chain)>,
}

impl LineageView {
    /// Sets (or clears) the bundle the open one was compared with.
    pub fn set_compared(&mut self, compared: Option<Compared>) {
        self.compared = compared;
        self.cache = None;
    }

    /// The bundle the open one was compared with.
    pub fn compared(&self) -> Option<&Compared> {
        self.compared.as_ref()
    }

    /// The parent folder picked in this tab, if any.
    pub fn parent(&self) -> Option<&PathBuf> {
        self.parent.as_ref()
    }

    /// The chain of the open bundle, as last drawn.
    pub fn chain(&self) -> Option<&Chain> {
        self.cache.as_ref().map(|(_, c)| c)
    }

    fn refresh(&mut self, s: &Session) {
        let key = (s.id, s.generation);
        if self.cache.as_ref().is_some_and(|(k, _)| *k == key) {
            return;
        }
        let Some(b) = &s.model.bundle else {
            self.cache = None;
            return;
        };
        let provenance = crate::format::Provenance {
            gptq: s.model.gptq.clone(),
            ..b.provenance.clone()
        };
        let path = s.path.display().to_string();
        let mut chain = Chain::build(
            &Inputs {
                path: &path,
                format: b.format.name(),
                provenance: &provenance,
                files: &s.model.files,
                findings: &s.model.findings,
                finished: matches!(s.model.outcome, Some(Ok(_))),
            },
            self.compared.as_ref(),
        );
        chain.signature = matches!(s.model.outcome, Some(Ok(_)))
            .then(|| crate::report::lineage::signature_headline(s.model.signature.as_ref()));
        self.cache = Some((key, chain));
    }
}

fn mark_color(ui: &egui::Ui, m: Mark) -> Color32 {
    match m {
        Mark::Verified => Color32::from_rgb(0x2e, 0xa0, 0x4e),
        Mark::Mismatch => ui.visuals().error_fg_color,
        Mark::Unknown => ui.visuals().weak_text_color(),
    }
}

/// The mark as a coloured badge whose accessible label names its owner
/// (`parent bundle: verified`), so a test can find which box says what.
fn badge_ui(ui: &mut egui::Ui, owner: &str, m: Mark) {
    let color = mark_color(ui, m);
    let r = egui::Frame::new()
        .fill(color)
        .corner_radius(6.0)
        .inner_margin(egui::Margin::symmetric(6, 1))
        .show(ui, |ui| {
            ui.label(
                RichText::new(format!("{} {}", m.symbol(), m.text()))
                    .color(Color32::WHITE)
                    .strong(),
            )
        })
        .inner;
    let label = format!("{owner}: {}", m.text());
    r.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &label));
}

/// A hash shortened to head…tail (the full value on hover).
fn short(v: &str) -> String {
    if v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()) {
        format!("{}…{}", &v[..12], &v[52..])
    } else {
        v.to_string()
    }
}

const BOX_WIDTH: f32 = 600.0;

fn node_ui(ui: &mut egui::Ui, n: &Node) {
    let stroke = Stroke::new(2.0, mark_color(ui, n.mark));
    egui::Frame::group(ui.style())
        .stroke(stroke)
        .corner_radius(8.0)
        .inner_margin(egui::Margin::symmetric(10, 6))
        .show(ui, |ui| {
            ui.set_width(BOX_WIDTH);
            ui.horizontal_wrapped(|ui| {
                badge_ui(ui, &n.title, n.mark);
                ui.label(RichText::new(&n.title).strong().size(15.0));
                ui.label(RichText::new(&n.subtitle).monospace());
            });
            if !n.hashes.is_empty() {
                egui::Grid::new(("lineage-hashes", &n.title))
                    .num_columns(3)
                    .spacing([12.0, 2.0])
                    .show(ui, |ui| {
                        for h in &n.hashes {
                            ui.label(RichText::new(&h.label).weak());
                            let v = h.value.as_deref().unwrap_or("—");
                            ui.label(RichText::new(short(v)).monospace())
                                .on_hover_text(v);
                            ui.label(
                                RichText::new(format!("{} {}", h.mark.symbol(), h.mark.text()))
                                    .color(mark_color(ui, h.mark)),
                            );
                            ui.end_row();
                        }
                    });
            }
            if let Some(note) = &n.note {
                ui.label(RichText::new(note).weak().small());
            }
        });
}

/// The arrow from the box above to the box below, with its checks beside it.
fn link_ui(ui: &mut egui::Ui, l: &Link) {
    ui.horizontal(|ui| {
        // Drawn after the checks, to the height they took.
        let (arrow, _) = ui.allocate_exact_size(egui::vec2(48.0, 1.0), egui::Sense::hover());
        let body = ui
            .vertical(|ui| {
                ui.spacing_mut().item_spacing.y = 1.0;
                ui.add_space(2.0);
                ui.horizontal(|ui| {
                    ui.label(RichText::new(&l.label).italics());
                    badge_ui(ui, &l.label, l.mark);
                });
                if l.checks.is_empty() {
                    ui.label(RichText::new("nothing to check").weak().small());
                }
                egui::Grid::new(("lineage-link", &l.label))
                    .num_columns(2)
                    .spacing([10.0, 1.0])
                    .show(ui, |ui| {
                        for c in &l.checks {
                            ui.label(
                                RichText::new(format!("{} {}", c.mark.symbol(), c.check))
                                    .monospace()
                                    .color(mark_color(ui, c.mark)),
                            )
                            .on_hover_text(
                                crate::finding::CheckId::lookup(&c.check)
                                    .map_or("", |id| id.rule()),
                            );
                            ui.label(RichText::new(&c.detail).weak().small());
                            ui.end_row();
                        }
                    });
                ui.add_space(2.0);
            })
            .response
            .rect;
        let color = mark_color(ui, l.mark);
        let x = arrow.center().x;
        let (top, bottom) = (body.top(), body.bottom());
        let p = ui.painter();
        p.line_segment(
            [egui::pos2(x, top), egui::pos2(x, bottom - 4.0)],
            Stroke::new(3.0, color),
        );
        p.add(egui::Shape::convex_polygon(
            vec![
                egui::pos2(x - 8.0, bottom - 12.0),
                egui::pos2(x + 8.0, bottom - 12.0),
                egui::pos2(x, bottom),
            ],
            color,
            Stroke::NONE,
        ));
    });
}

/// A JSON value as a tree: objects and lists fold, scalars show as JSON.
fn json_tree_ui(ui: &mut egui::Ui, key: &str, v: &serde_json::Value, id: egui::Id, depth: usize) {
    use serde_json::Value;
    let id = id.with(key);
    let children: Vec<(String, &Value)> = match v {
        Value::Object(m) => m.iter().map(|(k, x)| (k.clone(), x)).collect(),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, x)| (format!("[{i}]"), x))
            .collect(),
        scalar => {
            ui.horizontal_wrapped(|ui| {
                ui.label(RichText::new(key).weak());
                ui.label(RichText::new(scalar.to_string()).monospace());
            });
            return;
        }
    };
    egui::CollapsingHeader::new(key)
        .id_salt(id)
        .default_open(depth < 2)
        .show(ui, |ui| {
            for (k, x) in children {
                json_tree_ui(ui, &k, x, id, depth + 1);
            }
        });
}

/// Draws the tab.
pub(super) fn lineage_ui(
    ui: &mut egui::Ui,
    view: &mut LineageView,
    s: &Session,
    tx: &mut Commands,
) {
    view.refresh(s);
    let Some(chain) = view.chain() else {
        ui.label("Opening…");
        return;
    };
    let overlay = chain
        .nodes
        .iter()
        .any(|n| n.kind == crate::report::lineage::NodeKind::Parent);
    ui.horizontal(|ui| {
        ui.heading("Lineage");
        if overlay {
            if ui
                .button("Pick parent…")
                .on_hover_text("Choose the parent bundle folder and audit this overlay against it")
                .clicked()
            {
                tx.send(Command::PickParent);
            }
            if let Some(p) = &view.parent {
                ui.label(RichText::new(format!("parent: {}", p.display())).weak());
            }
        }
    });
    if let Some(sig) = &chain.signature {
        super::provenance::signature_line_ui(ui, s.model.signature.as_ref(), sig);
    }
    if let Some(r) = &chain.reading {
        ui.label(RichText::new(format!("Read as {r} (docs/provenance.md)")).italics());
    }
    ui.add_space(6.0);
    egui::ScrollArea::both()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            ui.spacing_mut().item_spacing.y = 2.0;
            for (k, n) in chain.nodes.iter().enumerate() {
                node_ui(ui, n);
                if let Some(l) = chain.links.get(k) {
                    link_ui(ui, l);
                }
            }
            let declared = s
                .model
                .bundle
                .as_ref()
                .and_then(|b| b.provenance.calibrated.clone());
            if let Some(d) = declared {
                ui.add_space(8.0);
                json_tree_ui(
                    ui,
                    "calibration (provenance.calibration, as declared)",
                    &d.calibration,
                    ui.scope_id().with("lineage-calibration"),
                    0,
                );
            }
        });
}
