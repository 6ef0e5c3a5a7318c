//! The NVFP4 expert panel of the real app, driven through egui_kittest:
//! picker and keys, code counts against an independent count of the shard
//! bytes, E4M3 histograms, the layer × expert map (hover, click, extreme
//! cell) and the messages shown instead of charts for broken sets.
#![cfg(feature = "gui")]

use std::time::Duration;

mod common;

use bundlescope::app::{Command, HeatStat};
use bundlescope::sample::nvfp4::Nvfp4Options;
use common::harness::{Gui, GuiOptions};
use common::nvfp4::Artifact;
use egui_kittest::kittest::Queryable;
use serde_json::json;

const L1_UP: &str = "model.decoder.layers.1.experts.gate_up_proj";
const L2_DOWN: &str = "model.decoder.layers.2.experts.down_proj";
/// The sample's experts per layer.
const EXPERTS: usize = 8;

/// E2M1 code counts of a weight's bytes, low nibble and high nibble.
fn nibble_counts(words: &[u8]) -> Vec<u64> {
    let mut c = vec![0u64; 16];
    for &b in words {
        c[usize::from(b & 15)] += 1;
        c[usize::from(b >> 4)] += 1;
    }
    c
}

fn byte_counts(bytes: &[u8]) -> Vec<u64> {
    let mut c = vec![0u64; 256];
    for &b in bytes {
        c[usize::from(b)] += 1;
    }
    c
}

/// A window tall enough that the whole panel, map included, is on screen.
fn gui() -> Gui {
    Gui::new(GuiOptions {
        size: [1280.0, 2000.0],
        ..GuiOptions::default()
    })
}

/// What only these tests need of the shared harness.
impl Gui {
    /// Runs frames until the background count of (tensor, expert) is in.
    fn counted(&mut self, i: usize, expert: Option<usize>) -> Vec<u64> {
        for _ in 0..2000 {
            self.harness.step();
            if let Some(h) = self.app().nvfp4().hist(i, expert) {
                let h = h.to_vec();
                self.harness.run_steps(2);
                return h;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("the count of tensor {i}, expert {expert:?} never finished");
    }

    /// The expert picker's text (the first combo box of the panel).
    fn picker(&self) -> String {
        self.harness
            .get_all_by_role(egui::accesskit::Role::ComboBox)
            .filter_map(|n| n.value())
            .find(|v| v.contains("expert"))
            .unwrap_or_default()
    }

    /// Runs frames until no count is running, so the layout stops moving.
    fn settle(&mut self) {
        for _ in 0..2000 {
            self.harness.step();
            if !self.app().nvfp4().counting() {
                self.harness.run_steps(3);
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("a count never finished");
    }

    /// Rests the pointer at `pos` past the tooltip delay.
    fn hover(&mut self, pos: egui::Pos2) {
        self.harness.hover_at(pos);
        self.harness.run_steps(45);
    }

    fn click_at(&mut self, pos: egui::Pos2) {
        self.harness.hover_at(pos);
        self.harness.step();
        self.harness.drag_at(pos);
        self.harness.step();
        self.harness.drop_at(pos);
        self.harness.run_steps(3);
    }
}

#[test]
fn a_moe_weight_shows_the_picker_and_counts_every_code_off_the_frame() {
    let a = Artifact::sample();
    let mut g = gui();
    g.open(&a.dir);
    let w = g.select(&format!("{L1_UP}.weight"));
    assert!(g.shows("NVFP4 experts · layer 1 · gate_up_proj"));
    assert_eq!(g.picker(), "all experts", "the expert picker");
    // Links to the siblings: global_scale, then back to the weight.
    let global = g.index(&format!("{L1_UP}.global_scale"));
    g.harness.get_by_label("global_scale").click();
    g.harness.run_steps(3);
    assert_eq!(g.app().selected(), Some(global));
    assert!(g.shows("NVFP4 experts · layer 1 · gate_up_proj"));
    g.harness.get_by_label("weight").click();
    g.harness.run_steps(3);
    assert_eq!(g.app().selected(), Some(w));
    let counts = g.counted(w, None);
    let words = a.bytes(&format!("{L1_UP}.weight"));
    let expected = nibble_counts(&words);
    assert_eq!(counts, expected, "all experts, against the shard bytes");
    // 8 experts × 128 rows × 128 columns, one code each.
    assert_eq!(counts.iter().sum::<u64>(), (EXPERTS * 128 * 128) as u64);
    assert!(g.shows(&format!("{} codes over all experts", EXPERTS * 128 * 128)));
    // The chart's bars carry the E2M1 values as labels, with their counts.
    let labels = [
        "+0", "+0.5", "+1", "+1.5", "+2", "+3", "+4", "+6", "-0", "-0.5", "-1", "-1.5", "-2", "-3",
        "-4", "-6",
    ];
    let bars: Vec<String> = labels
        .iter()
        .zip(&expected)
        .map(|(l, n)| format!("{l} {n}"))
        .collect();
    assert!(g.shows(&format!("E2M1 code counts: {}", bars.join(" · "))));
    // Cached: a second visit does not count again.
    let scales = g.select(&format!("{L1_UP}.scales"));
    g.select(&format!("{L1_UP}.weight"));
    assert!(!g.app().nvfp4().counting());
    assert_eq!(g.app().nvfp4().hist(w, None), Some(expected.as_slice()));
    // From the scales tensor the same panel and the same counts are reachable.
    g.select(&format!("{L1_UP}.scales"));
    assert!(g.shows("NVFP4 experts · layer 1 · gate_up_proj"));
    assert_eq!(g.app().selected(), Some(scales));
}

#[test]
fn brackets_step_the_expert_and_its_codes_and_scales_are_its_own() {
    let a = Artifact::sample();
    let mut g = gui();
    g.open(&a.dir);
    let w = g.select(&format!("{L1_UP}.weight"));
    let s = g.index(&format!("{L1_UP}.scales"));
    let all = g.counted(w, None);
    let words = a.bytes(&format!("{L1_UP}.weight"));
    let scale_bytes = a.bytes(&format!("{L1_UP}.scales"));
    let per_words = words.len() / EXPERTS;
    let per_scales = scale_bytes.len() / EXPERTS;
    let k = 3;
    for _ in 0..=k {
        g.harness.key_press(egui::Key::CloseBracket);
        g.harness.run_steps(2);
    }
    assert_eq!(g.app().nvfp4().expert, Some(k));
    assert_eq!(g.picker(), format!("expert {k}"), "the picker shows it");
    let codes = g.counted(w, Some(k));
    assert_eq!(
        codes,
        nibble_counts(&words[k * per_words..(k + 1) * per_words])
    );
    assert_ne!(codes, all);
    assert_eq!(codes.iter().sum::<u64>(), 128 * 128);
    let e4 = g.counted(s, Some(k));
    assert_eq!(
        e4,
        byte_counts(&scale_bytes[k * per_scales..(k + 1) * per_scales])
    );
    assert!(g.shows(&format!("{} scale bytes over expert {k}", 128 * 8)));
    // All experts' E4M3 histogram is the audit's, equal to the shard bytes.
    let audit_hist = {
        let st = g.app().session().unwrap().model.stats[s].clone();
        st.unwrap().e4m3.unwrap().hist
    };
    assert_eq!(audit_hist, byte_counts(&scale_bytes));
    // `]` stops at the last expert; `[` walks back to "all experts".
    for _ in 0..EXPERTS + 2 {
        g.harness.key_press(egui::Key::CloseBracket);
        g.harness.step();
    }
    assert_eq!(g.app().nvfp4().expert, Some(EXPERTS - 1));
    for _ in 0..EXPERTS + 2 {
        g.harness.key_press(egui::Key::OpenBracket);
        g.harness.step();
    }
    assert_eq!(g.app().nvfp4().expert, None);
    // The combo picks too.
    assert_eq!(g.picker(), "all experts");
    g.harness
        .get_all_by_role(egui::accesskit::Role::ComboBox)
        .find(|n| n.value().as_deref() == Some("all experts"))
        .unwrap()
        .click();
    g.harness.run_steps(2);
    g.harness.get_by_label("expert 5").click();
    g.harness.run_steps(2);
    assert_eq!(g.app().nvfp4().expert, Some(5));
    assert_eq!(
        g.counted(w, Some(5)),
        nibble_counts(&words[5 * per_words..6 * per_words])
    );
    // While the filter box has the keyboard, `]` is text, not a step.
    g.harness
        .key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::F);
    g.harness.run_steps(2);
    g.harness.key_press(egui::Key::CloseBracket);
    g.harness.run_steps(2);
    assert_eq!(g.app().nvfp4().expert, Some(5));
}

#[test]
fn clicking_a_map_cell_selects_that_tensor_and_expert() {
    let a = Artifact::sample();
    let mut g = gui();
    g.open(&a.dir);
    g.select(&format!("{L1_UP}.weight"));
    assert!(g.shows("layer × expert map"));
    let target = g.index(&format!("{L2_DOWN}.weight"));
    g.settle();
    let pos = g.app().nvfp4().heat_cell_pos(target, 5).unwrap();
    g.hover(pos);
    assert!(
        g.shows("layer 2 · down_proj · expert 5"),
        "hover names the cell"
    );
    g.click_at(pos);
    assert_eq!(g.app().selected(), Some(target));
    assert_eq!(g.app().nvfp4().expert, Some(5));
    assert!(g.shows("NVFP4 experts · layer 2 · down_proj"));
    // From a scales tensor, a click keeps showing scales.
    g.select(&format!("{L1_UP}.scales"));
    let scales = g.index("model.decoder.layers.0.experts.gate_up_proj.scales");
    g.settle();
    let pos = g.app().nvfp4().heat_cell_pos(scales, 1).unwrap();
    g.click_at(pos);
    assert_eq!(g.app().selected(), Some(scales));
    assert_eq!(g.app().nvfp4().expert, Some(1));
    // Every layer and both projections are rows of the map.
    let sets = g.app().nvfp4().sets().len();
    assert_eq!(sets, 4 * 2);
}

#[test]
fn one_edited_global_scale_is_the_extreme_cell() {
    let a = Artifact::sample();
    let name = format!("{L2_DOWN}.global_scale");
    let e = 5;
    a.patch(&name, |b| {
        let v = f32::from_le_bytes(b[4 * e..4 * e + 4].try_into().unwrap());
        b[4 * e..4 * e + 4].copy_from_slice(&(v * 1000.0).to_le_bytes());
    });
    let mut g = gui();
    g.open(&a.dir);
    assert_eq!(
        g.app().session().unwrap().verdict_text(),
        "Valid",
        "a large global scale is still a valid one"
    );
    g.select(&format!("{L1_UP}.weight"));
    let w = g.index(&format!("{L2_DOWN}.weight"));
    assert_eq!(g.app().nvfp4().heat_extreme(), Some((w, e)));
    assert!(g.shows("most extreme: layer 2 · down_proj · expert 5"));
    // Zero is invalid: flagged by the audit, still the extreme cell.
    let b = Artifact::sample();
    b.patch(&name, |b| {
        b[4 * e..4 * e + 4].copy_from_slice(&0f32.to_le_bytes())
    });
    g.open(&b.dir);
    g.select(&format!("{L1_UP}.weight"));
    assert_eq!(g.app().nvfp4().heat_extreme(), Some((w, e)));
    // Another statistic, another picture: the E4M3 means show no such outlier there.
    g.send(Command::HeatStat(HeatStat::MeanScale));
    g.harness.run_steps(2);
    assert_ne!(g.app().nvfp4().heat_extreme(), Some((w, e)));
}

#[test]
fn a_nan_scale_is_marked_and_broken_sets_show_a_message_instead() {
    let a = Artifact::sample();
    let name = format!("{L1_UP}.scales");
    let bytes = a.bytes(&name);
    let per = bytes.len() / EXPERTS;
    a.patch(&name, |b| b[4 * per + 9] = 0x7f);
    let mut g = gui();
    g.open(&a.dir);
    g.select(&name);
    assert!(g.shows("1 NaN (0x7F/0xFF)"));
    // The scales have errors: an expert's scales are not counted.
    let s = g.index(&name);
    g.send(Command::PickExpert(Some(4)));
    g.harness.run_steps(3);
    assert!(g.shows("The scales have errors"));
    assert!(g.app().nvfp4().hist(s, Some(4)).is_none());

    // A scales shape that disagrees with its weight: the set has no layout.
    let b = Artifact::sample();
    b.edit_header(&b.shard_of(&name), |h| {
        let shape = h[&name]["shape"].clone();
        let s: Vec<u64> = shape
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        h[&name]["shape"] = json!([s[0], s[1] * 2, s[2] / 2]);
    });
    g.open(&b.dir);
    let w = g.select(&format!("{L1_UP}.weight"));
    assert!(g.shows("The metadata of this expert set is broken"));
    g.harness.run_steps(3);
    assert!(!g.app().nvfp4().counting());
    assert!(g.app().nvfp4().hist(w, None).is_none());
    assert!(
        g.app().nvfp4().heat_cell_pos(w, 0).is_none(),
        "not a row of the map"
    );
}

#[test]
fn the_table_lists_tensors_shard_by_shard_in_data_order_and_names_naturally() {
    // Twelve layers, so that byte order would put layer 10 before layer 2.
    let a = Artifact::with(&Nvfp4Options {
        layers: 12,
        ..Nvfp4Options::default()
    });
    let mut g = gui();
    g.open(&a.dir);
    // Independently: shards in the manifest's order, each one's tensors by
    // their data offset in its own header.
    let mut expected = Vec::new();
    for s in a.manifest()["shards"].as_array().unwrap() {
        let (header, _) = Artifact::header(&a.dir.join(s["file"].as_str().unwrap()));
        let mut in_shard: Vec<(u64, String)> = header
            .iter()
            .filter(|(k, _)| *k != "__metadata__")
            .map(|(k, v)| (v["data_offsets"][0].as_u64().unwrap(), k.clone()))
            .collect();
        in_shard.sort();
        expected.extend(in_shard.into_iter().map(|(_, k)| k));
    }
    let names = |g: &mut Gui| -> Vec<String> {
        g.app().refresh_rows();
        let app = g.state();
        let b = app.session().unwrap().model.bundle.as_ref().unwrap();
        app.rows()
            .iter()
            .map(|&i| b.tensors[i].name.clone())
            .collect()
    };
    assert_eq!(names(&mut g), expected);

    // By name, layer 10 would follow layer 9: digits compare as numbers.
    g.send(Command::SortTable(bundlescope::app::SortColumn::Name, true));
    g.harness.step();
    let by_name = names(&mut g);
    let layer = |n: &str| {
        n.strip_prefix("model.decoder.layers.")
            .and_then(|r| r.split_once('.'))
            .map(|(l, rest)| (l.parse::<u32>().unwrap(), rest.to_string()))
    };
    let layered: Vec<_> = by_name.iter().filter_map(|n| layer(n)).collect();
    let mut sorted = layered.clone();
    sorted.sort();
    assert_eq!(layered, sorted);
    assert_eq!(by_name.len(), expected.len());
}

#[test]
fn clicking_a_global_scale_bar_picks_that_expert() {
    let a = Artifact::sample();
    let mut g = gui();
    g.open(&a.dir);
    g.select(&format!("{L1_UP}.weight"));
    g.settle();
    assert_eq!(g.app().nvfp4().expert, None);
    // The scales as the shard stores them (little-endian F32), read here.
    let globals: Vec<f64> = a
        .bytes(&format!("{L1_UP}.global_scale"))
        .chunks_exact(4)
        .map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())))
        .collect();
    assert_eq!(globals.len(), EXPERTS);
    for e in [6, 0] {
        let pos = g.app().nvfp4().global_bar_pos(e, globals[e]).unwrap();
        g.click_at(pos);
        assert_eq!(
            g.app().nvfp4().expert,
            Some(e),
            "clicked the bar of expert {e}"
        );
        assert!(
            g.picker().contains(&format!("expert {e}")),
            "{}",
            g.picker()
        );
        g.settle();
    }
}
