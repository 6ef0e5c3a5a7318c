//! The panel itself: the set's links, the expert picker, the global-scale
//! chart and the code and scale histograms; the table and the map have
//! their own modules.

use egui::RichText;
use egui_plot::{Bar, BarChart, Plot};

use super::heatmap::heat_ui;
use super::table::table_ui;
use super::{BAR, Nvfp4View, PICKED, finite_range, short_number};
use crate::app::chart_export::chart_ui as exportable;
use crate::app::shortcuts::{self, Action};
use crate::app::{Command, Commands, RowStatus, Session};
use crate::decode::nvfp4::{E2M1_LABELS, e4m3, e4m3_is_nan};
use crate::decode::stats::TensorStats;

/// Draws the panel for tensor `i` of the session's bundle.
pub fn panel_ui(
    ui: &mut egui::Ui,
    view: &mut Nvfp4View,
    s: &Session,
    i: usize,
    commands: &mut Commands,
) {
    let Some(b) = s.model.bundle.clone() else {
        return;
    };
    view.sync(&b);
    ui.add_space(6.0);
    let Some(set) = view.sets.iter().find(|x| x.holds(i)).cloned() else {
        ui.label(RichText::new("NVFP4 experts").strong());
        ui.label(
            RichText::new("This expert set lacks its weight; see the findings.")
                .color(ui.visuals().warn_fg_color),
        );
        return;
    };
    ui.label(
        RichText::new(format!(
            "NVFP4 experts · layer {} · {}",
            set.layer, set.proj
        ))
        .strong(),
    );
    ui.horizontal_wrapped(|ui| {
        for (label, part) in [
            ("weight", Some(set.weight)),
            ("scales", set.scales),
            ("global_scale", set.global),
        ] {
            let Some(j) = part else {
                ui.label(RichText::new(format!("no {label}")).color(ui.visuals().warn_fg_color));
                continue;
            };
            if ui
                .selectable_label(j == i, label)
                .on_hover_text(&b.tensors[j].name)
                .clicked()
                && j != i
            {
                commands.send(Command::Select(Some(j)));
            }
        }
    });
    let broken = set.experts == 0
        || [set.scales, set.global]
            .iter()
            .any(|p| p.is_none_or(|j| b.tensors[j].layout.is_none()));
    if broken {
        ui.label(
            RichText::new(
                "The metadata of this expert set is broken; the findings say what is wrong.",
            )
            .color(ui.visuals().warn_fg_color),
        );
        return;
    }
    picker_ui(ui, view, set.experts);
    let stats = |j: Option<usize>| {
        j.and_then(|j| s.model.stats.get(j))
            .and_then(Option::as_deref)
    };
    let globals = stats(set.global).and_then(|t: &TensorStats| t.global_scales.as_deref());
    let e4 = stats(set.scales).and_then(|t| t.e4m3.as_deref());
    let healthy = |j: usize| s.status(j) != RowStatus::Error;
    let mut wanted = Vec::new();
    if healthy(set.weight) {
        wanted.push((set.weight, view.expert));
    }
    if let (Some(sc), Some(_)) = (set.scales, view.expert)
        && healthy(sc)
    {
        wanted.push((sc, view.expert));
    }
    view.want(ui.ctx(), &b, &wanted);
    let id = format!("nv{}", set.weight);

    egui::CollapsingHeader::new("Global scales")
        .id_salt("nv-globals")
        .default_open(true)
        .show(ui, |ui| match globals {
            Some(g) => globals_ui(ui, view, &id, g, commands),
            None => waiting_ui(ui, s, "global scales"),
        });
    egui::CollapsingHeader::new("E2M1 codes")
        .id_salt("nv-codes")
        .default_open(true)
        .show(ui, |ui| {
            if !healthy(set.weight) {
                ui.label(
                    RichText::new("The weight has errors; its codes are not counted.")
                        .color(ui.visuals().warn_fg_color),
                );
            } else {
                match view.counts.get(&(set.weight, view.expert)) {
                    Some(Ok(h)) => codes_ui(ui, &id, h, view.expert, commands),
                    Some(Err(e)) => {
                        ui.label(RichText::new(e).color(ui.visuals().error_fg_color));
                    }
                    None => counting_ui(ui, "counting codes…"),
                }
            }
        });
    egui::CollapsingHeader::new("E4M3 scales")
        .id_salt("nv-e4m3")
        .default_open(true)
        .show(ui, |ui| match (view.expert, set.scales) {
            (None, _) => match e4 {
                Some(e4) => e4m3_ui(ui, &id, &e4.hist, None, commands),
                None => waiting_ui(ui, s, "E4M3 statistics"),
            },
            (Some(e), Some(sc)) if healthy(sc) => match view.counts.get(&(sc, Some(e))) {
                Some(Ok(h)) => e4m3_ui(ui, &id, h, Some(e), commands),
                Some(Err(err)) => {
                    ui.label(RichText::new(err).color(ui.visuals().error_fg_color));
                }
                None => counting_ui(ui, "counting scales…"),
            },
            _ => {
                ui.label(
                    RichText::new("The scales have errors; they are not counted.")
                        .color(ui.visuals().warn_fg_color),
                );
            }
        });
    egui::CollapsingHeader::new("Experts")
        .id_salt("nv-table")
        .default_open(true)
        .show(ui, |ui| table_ui(ui, view, &id, set.experts, globals, e4));
    egui::CollapsingHeader::new("Layer × expert map")
        .id_salt("nv-heat")
        .default_open(true)
        .show(ui, |ui| {
            exportable(ui, "layer × expert map", commands, |ui, tx| {
                heat_ui(ui, view, s, &b, i, tx)
            })
        });
}

fn waiting_ui(ui: &mut egui::Ui, s: &Session, what: &str) {
    if s.running() {
        counting_ui(ui, &format!("waiting for the audit's {what}…"));
    } else {
        ui.label(RichText::new(format!("no {what}: see the findings")).weak());
    }
}

fn counting_ui(ui: &mut egui::Ui, text: &str) {
    ui.horizontal(|ui| {
        ui.add(egui::Spinner::new());
        ui.label(RichText::new(text).weak());
    });
}

fn picker_ui(ui: &mut egui::Ui, view: &mut Nvfp4View, experts: usize) {
    if view.expert.is_some_and(|e| e >= experts) {
        view.expert = Some(experts - 1);
    }
    // Positions: 0 is "all", k + 1 is expert k.
    let pos = view.expert.map_or(0, |e| e + 1);
    let mut next = pos;
    if !ui.ctx().egui_wants_keyboard_input() {
        // The keys come from the app's one table (the `?` overlay lists them).
        if shortcuts::consume(ui.ctx(), Action::PreviousExpert) {
            next = next.saturating_sub(1);
        }
        if shortcuts::consume(ui.ctx(), Action::NextExpert) {
            next = (next + 1).min(experts);
        }
    }
    let text = |p: usize| match p {
        0 => "all experts".to_string(),
        p => format!("expert {}", p - 1),
    };
    ui.horizontal(|ui| {
        ui.label("Expert");
        if ui
            .small_button("◀")
            .on_hover_text("Previous expert ( [ )")
            .clicked()
        {
            next = next.saturating_sub(1);
        }
        egui::ComboBox::from_id_salt("nv-expert")
            .selected_text(text(pos))
            .width(110.0)
            .show_ui(ui, |ui| {
                for p in 0..=experts {
                    ui.selectable_value(&mut next, p, text(p));
                }
            })
            .response
            .on_hover_text("[ and ] step through the experts");
        if ui
            .small_button("▶")
            .on_hover_text("Next expert ( ] )")
            .clicked()
        {
            next = (next + 1).min(experts);
        }
        ui.label(RichText::new("[ / ] step").weak().small());
    });
    view.expert = next.checked_sub(1);
}

/// A fixed (no zoom or drag) plot whose x axis labels the integers that
/// are multiples of `step` with `label`, in a small font so that many fit.
fn fixed_plot(
    id: String,
    height: f32,
    step: f64,
    label: impl Fn(usize) -> String + 'static,
) -> Plot<'static> {
    let axis = egui_plot::AxisHints::new_x()
        .formatter(move |m, _| {
            let v = m.value.round();
            if (m.value - v).abs() < 1e-6 && v >= 0.0 {
                label(v as usize)
            } else {
                String::new()
            }
        })
        .label_spacing(12.0..=18.0)
        .tick_label_font(egui::FontId::proportional(10.0));
    Plot::new(id)
        .height(height)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .show_y(false)
        .x_grid_spacer(egui_plot::uniform_grid_spacer(move |_| {
            [step, step * 2.0, step * 4.0]
        }))
        .custom_x_axes(vec![axis])
}

/// A 1-2-5 step giving about ten labels over `span`.
fn nice_step(span: f64) -> f64 {
    let raw = (span / 10.0).max(1.0);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * p)
}

fn globals_ui(ui: &mut egui::Ui, view: &mut Nvfp4View, id: &str, g: &[f64], tx: &mut Commands) {
    let bad = g.iter().filter(|v| !(v.is_finite() && **v > 0.0)).count();
    let (lo, hi) = finite_range(g.iter().copied());
    ui.label(
        RichText::new(format!(
            "{} experts · min {} · max {}{}",
            g.len(),
            short_number(lo, false),
            short_number(hi, false),
            if bad > 0 {
                format!(" · {bad} not finite and > 0")
            } else {
                String::new()
            }
        ))
        .small(),
    );
    let err = ui.visuals().error_fg_color;
    let bars: Vec<Bar> = g
        .iter()
        .enumerate()
        .map(|(e, &v)| {
            let ok = v.is_finite() && v > 0.0;
            Bar::new(e as f64, if v.is_finite() { v } else { 0.0 })
                .width(0.8)
                .name(format!("expert {e}: {v:.6e}"))
                .fill(if !ok {
                    err
                } else if view.expert == Some(e) {
                    PICKED
                } else {
                    BAR
                })
        })
        .collect();
    let chart = BarChart::new("global scales", bars)
        .element_formatter(Box::new(|bar, _| format!("{}\n(click to pick)", bar.name)));
    let plot = fixed_plot(
        format!("{id}-globals"),
        110.0,
        nice_step(g.len() as f64),
        |e| e.to_string(),
    );
    let resp = exportable(ui, "global scales", tx, |ui, _| {
        plot.show(ui, |p| p.bar_chart(chart))
    });
    view.globals_geom = Some(resp.transform);
    if resp.response.clicked()
        && let Some(pos) = resp.response.interact_pointer_pos()
    {
        let x = resp.transform.value_from_position(pos).x.round();
        if x >= 0.0 && (x as usize) < g.len() {
            view.expert = Some(x as usize);
        }
    }
}

fn codes_ui(ui: &mut egui::Ui, id: &str, h: &[u64], expert: Option<usize>, tx: &mut Commands) {
    let total: u64 = h.iter().sum();
    ui.label(
        RichText::new(format!(
            "{total} codes over {}",
            expert.map_or("all experts".to_string(), |e| format!("expert {e}"))
        ))
        .small(),
    );
    let t = total.max(1) as f64;
    let bars: Vec<Bar> = h
        .iter()
        .zip(E2M1_LABELS)
        .enumerate()
        .map(|(c, (&n, label))| {
            Bar::new(c as f64, n as f64)
                .width(0.8)
                .name(format!("code {c} = {label}"))
                .fill(BAR)
        })
        .collect();
    let chart = BarChart::new("codes", bars).element_formatter(Box::new(move |bar, _| {
        format!(
            "{}\n{} codes ({:.2}%)",
            bar.name,
            bar.value as u64,
            bar.value / t * 100.0
        )
    }));
    let plot = fixed_plot(format!("{id}-codes"), 140.0, 1.0, |c| {
        E2M1_LABELS.get(c).map_or(String::new(), |l| l.to_string())
    });
    exportable(ui, "E2M1 codes", tx, |ui, _| {
        plot.show(ui, |p| p.bar_chart(chart))
    })
    .response
    .widget_info(|| {
        // The bars, for screen readers (and tests): the plot paints its text.
        let bars: Vec<String> = E2M1_LABELS
            .iter()
            .zip(h)
            .map(|(l, n)| format!("{l} {n}"))
            .collect();
        egui::WidgetInfo::labeled(
            egui::Role::Image,
            true,
            format!("E2M1 code counts: {}", bars.join(" · ")),
        )
    });
}

fn e4m3_ui(ui: &mut egui::Ui, id: &str, h: &[u64], expert: Option<usize>, tx: &mut Commands) {
    if h.len() != 256 {
        ui.label(
            RichText::new("the E4M3 histogram is malformed").color(ui.visuals().error_fg_color),
        );
        return;
    }
    let total: u64 = h.iter().sum();
    let nan = h[0x7f] + h[0xff];
    let warn = ui.visuals().warn_fg_color;
    ui.horizontal_wrapped(|ui| {
        ui.label(
            RichText::new(format!(
                "{total} scale bytes over {}",
                expert.map_or("all experts".to_string(), |e| format!("expert {e}"))
            ))
            .small(),
        );
        if nan > 0 {
            ui.label(
                RichText::new(format!("{nan} NaN (0x7F/0xFF)"))
                    .small()
                    .color(warn),
            );
        }
    });
    // Only the occupied bytes (and the NaN ones when present): real scales
    // fill a few dozen of the 256.
    let present = |b: &usize| h[*b] > 0;
    // One empty byte either side, without crossing into the other sign.
    let lo = (0..256).find(present).unwrap_or(0);
    let lo = if lo % 128 == 0 { lo } else { lo - 1 };
    let hi = (0..256).rev().find(present).unwrap_or(255);
    let hi = if hi % 128 == 127 { hi } else { hi + 1 };
    let t = total.max(1) as f64;
    let bars: Vec<Bar> = (lo..=hi)
        .map(|b| {
            let byte = b as u8;
            let nan = e4m3_is_nan(byte);
            Bar::new(b as f64, h[b] as f64)
                .width(0.9)
                .name(if nan {
                    format!("byte {b:#04x} = NaN")
                } else {
                    format!("byte {b:#04x} = {}", e4m3(byte))
                })
                .fill(if nan { warn } else { BAR })
        })
        .collect();
    let chart = BarChart::new("scales", bars).element_formatter(Box::new(move |bar, _| {
        format!(
            "{}\n{} scales ({:.2}%)",
            bar.name,
            bar.value as u64,
            bar.value / t * 100.0
        )
    }));
    let plot = fixed_plot(
        format!("{id}-e4m3"),
        120.0,
        nice_step((hi - lo) as f64),
        |b| match u8::try_from(b) {
            Ok(b) if e4m3_is_nan(b) => "NaN".into(),
            Ok(b) => short_number(f64::from(e4m3(b)), true),
            Err(_) => String::new(),
        },
    );
    exportable(ui, "E4M3 scales", tx, |ui, _| {
        plot.show(ui, |p| p.bar_chart(chart))
    });
}
