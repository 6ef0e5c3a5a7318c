//! A GGUF file's key/value metadata as a tree in the Summary: keys grouped
//! by their first dotted part (`general`, `llama`, `tokenizer`, …), the chat
//! template as text, and long arrays (a tokenizer's tokens and merges) as
//! their count with a searchable list that lays out only the visible rows.

use egui::RichText;

use crate::format::gguf::{Metadata, Value};
use crate::util::text::{SHOWN_CHARS, shown_lines};

/// Arrays up to this long are shown inline.
const INLINE_ITEMS: usize = 16;

/// The filter text and the matching item indices of one long array,
/// recomputed only when the filter changes (kept in egui's temp memory).
#[derive(Clone, Default)]
struct Search {
    filter: String,
    /// The matches and the filter they were computed for.
    matches: Option<(String, std::sync::Arc<Vec<usize>>)>,
}

/// Draws the metadata tree.
pub(super) fn metadata_ui(ui: &mut egui::Ui, meta: &Metadata) {
    ui.label(RichText::new("Metadata").strong())
        .on_hover_text(format!(
            "GGUF v{}, {} key/value pairs, alignment {}, data section at byte {}",
            meta.version,
            meta.kvs.len(),
            meta.alignment,
            meta.data_start
        ));
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, kv) in meta.kvs.iter().enumerate() {
        let group = kv.key.split('.').next().unwrap_or("");
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, list)) => list.push(i),
            None => groups.push((group, vec![i])),
        }
    }
    for (group, keys) in groups {
        egui::CollapsingHeader::new(format!("{group} ({})", keys.len()))
            .id_salt(("gguf-group", group))
            .default_open(group == "general")
            .show(ui, |ui| {
                for i in keys {
                    let kv = &meta.kvs[i];
                    let short = kv.key.strip_prefix(group).unwrap_or(&kv.key);
                    let short = short.strip_prefix('.').unwrap_or(short);
                    entry_ui(ui, &kv.key, short, &kv.value);
                }
            });
    }
}

fn entry_ui(ui: &mut egui::Ui, key: &str, short: &str, value: &Value) {
    match value {
        Value::Str(s) if s.contains('\n') || s.len() > 120 => {
            egui::CollapsingHeader::new(format!("{short}: text, {} bytes", s.len()))
                .id_salt(("gguf-text", key))
                .show(ui, |ui| {
                    egui::ScrollArea::vertical()
                        .id_salt(("gguf-text-scroll", key))
                        .max_height(240.0)
                        .show(ui, |ui| {
                            // Line breaks kept, hidden characters escaped;
                            // a 100 KB template is cut (the JSON keeps it).
                            ui.label(
                                RichText::new(shown_lines(s, 50 * SHOWN_CHARS))
                                    .monospace()
                                    .small(),
                            );
                        });
                });
        }
        Value::Array(_, items) if items.len() > INLINE_ITEMS => {
            egui::CollapsingHeader::new(format!("{short}: {}", value.short()))
                .id_salt(("gguf-array", key))
                .show(ui, |ui| long_array_ui(ui, key, items));
        }
        Value::Array(_, items) => {
            let text = items
                .iter()
                .map(Value::short)
                .collect::<Vec<_>>()
                .join(", ");
            ui.horizontal_wrapped(|ui| {
                ui.label(RichText::new(format!("{short}:")).weak());
                ui.label(RichText::new(format!("[{text}]")).monospace())
                    .on_hover_text(value.type_label());
            });
        }
        v => {
            ui.horizontal_wrapped(|ui| {
                ui.label(RichText::new(format!("{short}:")).weak());
                ui.label(RichText::new(v.short()).monospace())
                    .on_hover_text(format!("{key} ({})", v.type_label()));
            });
        }
    }
}

fn long_array_ui(ui: &mut egui::Ui, key: &str, items: &[Value]) {
    let id = ui.make_persistent_id(("gguf-search", key));
    let mut search: Search = ui.data_mut(|d| d.get_temp(id).unwrap_or_default());
    ui.horizontal(|ui| {
        let label = ui.label("find");
        ui.add(
            egui::TextEdit::singleline(&mut search.filter)
                .hint_text("part of an item")
                .desired_width(180.0),
        )
        .labelled_by(label.id);
    });
    // Compared with the filter the matches were made for rather than
    // trusting `changed()`: an edit can arrive as an accessibility action.
    if search
        .matches
        .as_ref()
        .is_none_or(|(f, _)| *f != search.filter)
    {
        let f = search.filter.to_lowercase();
        let m: Vec<usize> = if f.is_empty() {
            (0..items.len()).collect()
        } else {
            items
                .iter()
                .enumerate()
                .filter(|(_, v)| v.short().to_lowercase().contains(&f))
                .map(|(i, _)| i)
                .collect()
        };
        search.matches = Some((search.filter.clone(), std::sync::Arc::new(m)));
    }
    let matches = search
        .matches
        .as_ref()
        .map(|(_, m)| m.clone())
        .unwrap_or_default();
    ui.label(RichText::new(format!("{} of {} shown", matches.len(), items.len())).weak());
    let row = ui.text_style_height(&egui::TextStyle::Monospace);
    egui::ScrollArea::vertical()
        .id_salt(("gguf-array-scroll", key))
        .max_height(200.0)
        .show_rows(ui, row, matches.len(), |ui, range| {
            for &i in &matches[range] {
                if let Some(v) = items.get(i) {
                    ui.label(RichText::new(format!("{i:>7}  {}", v.short())).monospace());
                }
            }
        });
    ui.data_mut(|d| d.insert_temp(id, search));
}
