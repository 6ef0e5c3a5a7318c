//! The detail panel of the selected tensor: every record field, its byte
//! range and its findings.

use egui::RichText;

use super::{Commands, Nvfp4View, Session, SpotView};
use crate::report::human_bytes;
use crate::util::text::{SHOWN_CHARS, shown};

/// Draws the selected tensor's details.
pub(super) fn detail_ui(
    ui: &mut egui::Ui,
    s: &Session,
    selected: Option<usize>,
    spot: &mut SpotView,
    nvfp4: &mut Nvfp4View,
    hashing: bool,
    tx: &mut Commands,
) {
    let Some(b) = &s.model.bundle else { return };
    let Some(i) = selected.filter(|&i| i < b.tensors.len()) else {
        ui.label(RichText::new("Select a tensor in the table (↑/↓ move the selection).").weak());
        return;
    };
    let t = &b.tensors[i];
    // Escaped (a name from the file may hide or reorder text), in full:
    // the detail panel wraps, so only the 100 KB pathological names are cut.
    ui.add(
        egui::Label::new(
            RichText::new(shown(&t.name, 8 * SHOWN_CHARS))
                .monospace()
                .strong(),
        )
        .wrap(),
    );
    let (mark, hover) = super::tensors::status_mark(s.status(i));
    // GGUF: the shape is shown in PyTorch order, ggml's ne order on hover.
    let hover = match t.record.get("ne") {
        Some(ne) => format!("{hover}\nshape in PyTorch order; ggml ne = {ne}"),
        None => hover.to_string(),
    };
    ui.label(format!(
        "{mark} {} · {} · {} resident",
        t.precision.as_str(),
        t.shape_text(),
        t.resident_bytes.map_or("?".into(), human_bytes)
    ))
    .on_hover_text(hover);
    if let Some(target) = &t.alias_of {
        ui.label(format!(
            "alias of {target}: shares its memory, adds no bytes"
        ));
    }
    if let Some((start, end)) = t.range() {
        let file = b.files.get(t.file).map_or("payload", |f| f.name.as_str());
        ui.label(format!(
            "bytes {start}..{end} of {file} ({})",
            human_bytes(end - start)
        ));
    }
    range_hash_ui(ui, s, b, i, hashing);
    ui.add_space(6.0);
    let findings: Vec<_> = s.findings_of(&t.name).collect();
    ui.label(RichText::new(format!("Findings ({})", findings.len())).strong());
    if findings.is_empty() {
        ui.label(RichText::new(if s.running() { "none so far" } else { "none" }).weak());
    }
    for f in findings {
        ui.horizontal_wrapped(|ui| {
            ui.label(
                RichText::new(format!("{} [{}]", f.severity.as_str(), f.check))
                    .color(ui.visuals().error_fg_color),
            );
            ui.label(shown(&f.message, 4 * SHOWN_CHARS));
        });
        let mut at = Vec::new();
        if let Some(field) = &f.field {
            at.push(format!("field {field}"));
        }
        if let Some(o) = f.offset {
            at.push(format!("offset {o}"));
        }
        if !at.is_empty() {
            ui.label(RichText::new(at.join(", ")).weak());
        }
    }
    super::spotcheck::detail_section_ui(ui, spot, b, i, tx);
    if super::nvfp4::is_member(b, i) {
        super::nvfp4::panel_ui(ui, nvfp4, s, i, tx);
    }
    if let Some(crate::format::Layout::Gguf { ty, .. }) = t.layout
        && !ty.decoded()
    {
        ui.add_space(6.0);
        ui.label(
            RichText::new(format!(
                "{}: listed and size-checked, not decoded by bundlescope",
                ty.name()
            ))
            .weak(),
        );
    }
    if let Some(stats) = s.model.stats.get(i).and_then(Option::as_ref) {
        ui.add_space(6.0);
        super::histograms::stats_ui(ui, &format!("t{i}"), stats, tx);
    } else if let Ok(target) = b.resolve_alias(i)
        && target != i
        && let Some(stats) = s.model.stats.get(target).and_then(Option::as_ref)
    {
        ui.add_space(6.0);
        super::histograms::stats_ui(ui, &format!("t{target}"), stats, tx);
    }
    ui.add_space(6.0);
    ui.label(RichText::new("Record").strong());
    // Values can be long (names, grids): truncate, full text on hover, so the
    // panel never grows past the window.
    let value_width = (ui.available_width() - 130.0).max(80.0);
    egui::Grid::new("record-fields")
        .striped(true)
        .num_columns(2)
        .max_col_width(value_width)
        .show(ui, |ui| {
            let quant = t.quantization().map(|q| ("quantization", q.to_json()));
            // Safetensors rows keep no copy of their header entry.
            let rebuilt = matches!(
                b.format,
                crate::format::FormatKind::MlxLm | crate::format::FormatKind::Safetensors
            )
            .then(|| crate::format::mlxlm::header_entry(t));
            let record = rebuilt.as_ref().unwrap_or(&t.record);
            let fields = record.as_object().into_iter().flatten();
            for (k, v) in fields
                .map(|(k, v)| (k.as_str(), v))
                .chain(quant.iter().map(|(k, v)| (*k, v)))
            {
                ui.label(RichText::new(k).monospace());
                let text = v.to_string();
                ui.add(egui::Label::new(RichText::new(&text).monospace()).truncate())
                    .on_hover_text(text);
                ui.end_row();
            }
        });
}

/// The tensor's range hash (an alias shows its target's), once the
/// background job after the audit has it.
fn range_hash_ui(
    ui: &mut egui::Ui,
    s: &Session,
    b: &crate::format::Bundle,
    i: usize,
    hashing: bool,
) {
    let Ok(target) = b.resolve_alias(i) else {
        return;
    };
    if b.tensors[target].range().is_none() {
        return;
    }
    let hash = s.model.range_hashes.get(target).cloned().flatten();
    let of = if target == i { "" } else { " (its target's)" };
    ui.horizontal(|ui| {
        ui.label(RichText::new(format!("range SHA-256{of}")).weak());
        match hash {
            Some(h) => {
                ui.add(egui::Label::new(RichText::new(&h).monospace().small()).truncate())
                    .on_hover_text(&h);
            }
            None if hashing || s.running() => {
                ui.label(RichText::new("hashing…").weak());
            }
            None => {
                ui.label(RichText::new("not hashed").weak());
            }
        }
    });
}
