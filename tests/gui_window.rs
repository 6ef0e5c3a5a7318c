//! The window around the panels, driven through egui_kittest: the menu bar,
//! the `?` overlay and the shortcut table behind it, errors first on an
//! invalid bundle, the recent list and the actions offered, the title,
//! what is remembered between runs, and chart export.
#![cfg(feature = "gui")]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use bundlescope::app::shortcuts::{Action, SHORTCUTS};
use bundlescope::app::{
    App, CentralTab, ChartShot, ChartTarget, Command, Overlay, RowStatus, SideTab,
};
use common::harness::{Gui, GuiOptions, gui};
use common::nvfp4::Artifact;
use common::*;
use egui::accesskit::Role;
use egui::{Key, Modifiers, ThemePreference};
use egui_kittest::kittest::{NodeT, Queryable};

/// The name of the sample's last tensor in payload order, broken so the
/// audit ends with exactly one error; and the bundle.
fn broken_last() -> (TestBundle, String) {
    let b = TestBundle::v2();
    let m = b.manifest();
    let records = m["tensors"].as_array().expect("tensors");
    let last = records
        .iter()
        .filter(|r| r["scales_offset"].is_u64())
        .max_by_key(|r| r["offset"].as_u64().unwrap())
        .unwrap();
    let name = last["name"].as_str().unwrap().to_string();
    let at = last["scales_offset"].as_u64().unwrap() as usize;
    b.patch_payload(true, |p| p[at..at + 2].copy_from_slice(&0u16.to_le_bytes()));
    (b, name)
}

/// A node's text as kittest's label queries read it (a label's text is
/// its AccessKit value).
fn label(n: &egui_kittest::Node<'_>) -> Option<String> {
    let n = n.accesskit_node();
    if n.role() == Role::Label {
        n.value()
    } else {
        n.label()
    }
}

/// Clicks the menu-bar menu `menu`, then the item whose label starts with
/// `item` (an item's label ends with its shortcut).
fn menu_click(g: &mut Gui, menu: &str, item: &str) {
    g.harness.get_by_label(menu).click();
    g.harness.run_steps(2);
    let node = g
        .harness
        .get_all_by_role(Role::Button)
        .find(|n| label(n).is_some_and(|l| l.starts_with(item)))
        .unwrap_or_else(|| panic!("no item {item:?} in {menu}"));
    node.click();
    g.harness.run_steps(3);
}

/// The label of the menu item starting with `item` (the menu is open).
fn item_label(g: &Gui, item: &str) -> Option<String> {
    g.harness
        .get_all_by_role(Role::Button)
        .filter_map(|n| label(&n))
        .find(|l| l.starts_with(item))
}

fn shortcut_text(g: &Gui, action: Action) -> String {
    let ctx = g.harness.ctx.clone();
    bundlescope::app::shortcuts::text(&ctx, action)
}

#[test]
fn the_file_menu_opens_saves_and_closes_by_label() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    g.harness.get_by_label("File").click();
    g.harness.run_steps(2);
    // Every item is there, each with its shortcut from the table.
    for (item, action) in [
        ("Open…", Some(Action::Open)),
        ("Open Recent", None),
        ("Save Report…", Some(Action::SaveReport)),
        ("Close", Some(Action::Close)),
    ] {
        let label = item_label(&g, item).unwrap_or_else(|| panic!("{item}"));
        if let Some(a) = action {
            let keys = shortcut_text(&g, a);
            assert!(keys.starts_with("Ctrl+"), "{keys}: Ctrl off macOS");
            assert!(label.ends_with(&keys), "{label:?} shows {keys:?}");
        }
    }
    g.harness.key_press(Key::Escape);
    g.harness.run_steps(2);
    // Open Recent lists the bundle; clicking it opens it again.
    g.harness.get_by_label("File").click();
    g.harness.run_steps(2);
    g.harness
        .get_all_by_role(Role::Button)
        .find(|n| label(n).is_some_and(|l| l.starts_with("Open Recent")))
        .unwrap()
        .hover();
    g.harness.run_steps(3);
    let recent = b.dir.canonicalize().unwrap().display().to_string();
    let before = g.state().session().unwrap().id;
    g.harness.get_by_label(&recent).click();
    g.harness.step();
    g.finish();
    assert_ne!(g.state().session().unwrap().id, before, "opened again");
    assert_eq!(g.verdict(), "Valid");
    // Close goes back to the welcome screen, and does not quit.
    menu_click(&mut g, "File", "Close");
    assert!(g.state().session().is_none());
    assert!(g.shows("Open demo bundle"));
    // With nothing open, Save Report… and Close are offered but disabled.
    g.harness.get_by_label("File").click();
    g.harness.run_steps(2);
    for item in ["Save Report…", "Close"] {
        let n = g
            .harness
            .get_all_by_role(Role::Button)
            .find(|n| label(n).is_some_and(|l| l.starts_with(item)))
            .unwrap();
        assert!(
            n.accesskit_node().is_disabled(),
            "{item} is disabled with nothing audited"
        );
    }
}

#[test]
fn the_view_menu_switches_tabs_and_theme_and_help_shows_about() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    g.harness.get_by_label("View").click();
    g.harness.run_steps(2);
    let quality = item_label(&g, "Quality").unwrap();
    assert!(quality.ends_with(&shortcut_text(&g, Action::TabQuality)));
    g.harness
        .get_all_by_role(Role::Button)
        .find(|n| label(n).is_some_and(|l| l == quality))
        .unwrap()
        .click();
    g.harness.run_steps(3);
    assert_eq!(g.state().central(), CentralTab::Quality);
    menu_click(&mut g, "View", "Summary");
    assert_eq!(g.state().side(), SideTab::Summary);
    // View → Theme → Dark: the app's choice and egui's.
    g.harness.get_by_label("View").click();
    g.harness.run_steps(2);
    g.harness.get_by_label_contains("Theme").hover();
    g.harness.run_steps(3);
    g.harness.get_by_label("Dark").click();
    g.harness.run_steps(3);
    assert_eq!(g.state().theme(), ThemePreference::Dark);
    assert_eq!(g.harness.ctx.theme(), egui::Theme::Dark);
    // Help → About: the version, and MLX's (or why there is none).
    menu_click(&mut g, "Help", "About bundlescope");
    assert_eq!(g.state().overlay(), Some(Overlay::About));
    assert!(g.shows(&format!("bundlescope {}", env!("CARGO_PKG_VERSION"))));
    let mut mlx = None;
    for _ in 0..500 {
        g.harness.step();
        mlx = g
            .harness
            .query_all_by_label_contains("MLX")
            .filter_map(|n| label(&n))
            .find(|l| !l.ends_with('…'));
        if mlx.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mlx = mlx.expect("the MLX line");
    match bundlescope::mlx::version() {
        Ok(v) => assert_eq!(mlx, format!("MLX {v}")),
        Err(_) => assert!(mlx.starts_with("MLX: "), "{mlx}"),
    }
    g.harness.key_press(Key::Escape);
    g.harness.run_steps(3);
    assert_eq!(g.state().overlay(), None);
}

#[test]
fn the_shortcuts_overlay_lists_every_shortcut_the_keys_handle() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    g.harness.key_press(Key::Questionmark);
    g.harness.run_steps(3);
    assert_eq!(g.state().overlay(), Some(Overlay::Shortcuts));
    assert!(g.shows("Keyboard shortcuts"));
    for s in SHORTCUTS {
        assert!(g.shows(s.what), "{} is listed", s.what);
        let ctx = g.harness.ctx.clone();
        let keys = bundlescope::app::shortcuts::keys_text(&ctx, &s.keys);
        assert!(g.shows(&keys), "{keys} is listed");
    }
    g.harness.key_press(Key::Escape);
    g.harness.run_steps(3);
    assert_eq!(g.state().overlay(), None);
    // Help → Keyboard shortcuts shows the same list.
    menu_click(&mut g, "Help", "Keyboard shortcuts");
    assert_eq!(g.state().overlay(), Some(Overlay::Shortcuts));
    g.harness.key_press(Key::Escape);
    g.harness.run_steps(3);
    // The table's keys are the ones handled: Cmd+2, Cmd+1, Cmd+W.
    g.harness.key_press_modifiers(Modifiers::COMMAND, Key::Num2);
    g.harness.run_steps(2);
    assert_eq!(g.state().central(), CentralTab::Quality);
    g.harness.key_press_modifiers(Modifiers::COMMAND, Key::Num1);
    g.harness.run_steps(2);
    assert_eq!(g.state().central(), CentralTab::Tensors);
    // A `?` typed into the filter is text, not the overlay.
    g.harness.key_press_modifiers(Modifiers::COMMAND, Key::F);
    g.harness.run_steps(2);
    g.harness.get_by_role(Role::TextInput).type_text("?");
    g.harness.key_press(Key::Questionmark);
    g.harness.run_steps(2);
    assert_eq!(g.state().overlay(), None);
    assert_eq!(g.state().view().filter, "?");
    g.harness.key_press_modifiers(Modifiers::COMMAND, Key::W);
    g.harness.run_steps(2);
    assert!(g.state().session().is_none(), "Cmd+W closes the bundle");
}

#[test]
fn an_invalid_bundle_lists_its_error_first_and_the_badge_selects_the_tensor() {
    let (b, name) = broken_last();
    // Short: the table cannot show every row, nor the log every check.
    let mut g = Gui::new(GuiOptions {
        size: [1280.0, 560.0],
        ..GuiOptions::default()
    });
    g.open(&b.dir);
    assert_eq!(g.verdict(), "Invalid (1 error)");
    let i = g.index(&name);
    assert_eq!(g.state().session().unwrap().status(i), RowStatus::Error);
    assert!(
        g.state().session().unwrap().log.len() > 40,
        "more checks than the panel shows"
    );
    // The error is in sight, above every passing check, without ticking
    // "errors only".
    let message = "scales are not finite and > 0";
    let error_top = g.harness.get_by_label_contains(message).rect().top();
    // The check log's marks: below the panel's header (the table has its own).
    let log_top = g
        .harness
        .get_by_label_contains("checks passed")
        .rect()
        .bottom();
    let passes: Vec<f32> = g
        .harness
        .query_all_by_label("✔")
        .map(|n| n.rect().top())
        .filter(|&t| t > log_top)
        .collect();
    assert!(!passes.is_empty(), "passing checks are listed too");
    assert!(
        passes.iter().all(|&t| t > error_top),
        "error at {error_top}, passes at {passes:?}"
    );
    // The tensor's row (left of the side panel, above the log) is out of
    // view in payload order.
    let table_rows = |g: &Gui| {
        g.harness
            .query_all_by_label(&name)
            .filter(|n| n.rect().left() < 700.0 && n.rect().bottom() < log_top)
            .count()
    };
    assert_eq!(table_rows(&g), 0, "the last tensor starts out of view");
    assert_eq!(g.state().selected(), None);
    g.harness.get_by_label_contains("Invalid (1 error)").click();
    g.harness.run_steps(4);
    assert_eq!(g.state().selected(), Some(i));
    assert_eq!(g.state().side(), SideTab::Tensor);
    assert_eq!(table_rows(&g), 1, "the table scrolled to the failing row");
}

#[test]
fn the_badge_clears_a_filter_that_hides_every_failing_tensor() {
    let (b, name) = broken_last();
    let mut g = gui();
    g.open(&b.dir);
    g.app().send(Command::ShowTab(CentralTab::Quality));
    g.harness.run_steps(2);
    // A filter that matches nothing that failed.
    g.harness.key_press_modifiers(Modifiers::COMMAND, Key::F);
    g.harness.run_steps(2);
    g.harness.get_by_role(Role::TextInput).type_text("embed");
    g.harness.run_steps(2);
    g.harness.get_by_label_contains("Invalid (1 error)").click();
    g.harness.run_steps(3);
    assert_eq!(g.state().selected(), Some(g.index(&name)));
    assert_eq!(g.state().central(), CentralTab::Tensors);
    assert!(g.state().view().filter.is_empty());
}

#[test]
fn a_folder_that_is_not_a_bundle_is_not_remembered_and_offers_no_reverify() {
    let b = TestBundle::v2();
    let empty = tempfile::tempdir().unwrap();
    let mut g = gui();
    g.open(empty.path());
    assert_eq!(g.verdict(), "Not a bundle");
    assert!(g.state().recent().is_empty(), "{:?}", g.state().recent());
    assert!(!g.shows("Re-verify"));
    assert!(!g.shows("Save report…"));
    assert!(!g.state().audited());
    // Cmd+S with nothing audited asks for no file.
    g.harness.key_press_modifiers(Modifiers::COMMAND, Key::S);
    g.harness.run_steps(2);
    assert!(
        g.state()
            .notice()
            .is_some_and(|n| n.message.contains("nothing audited"))
    );
    g.open(&b.dir);
    assert_eq!(g.state().recent().len(), 1);
    assert!(g.shows("Re-verify") && g.shows("Save report…"));
    // A failed open after it leaves the list as it was.
    g.open(empty.path());
    for _ in 0..200 {
        g.harness.step();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(g.state().recent().len(), 1);
    assert_eq!(
        g.state().recent()[0],
        b.dir.canonicalize().unwrap(),
        "only the bundle"
    );
}

#[test]
fn the_welcome_screen_names_every_format_the_app_reads() {
    let mut g = gui();
    g.harness.run_steps(2);
    for f in bundlescope::app::READS {
        assert!(g.shows(f), "{f}");
    }
    assert!(g.shows("audio8") && g.shows("mlx-nvfp4"));
}

/// The titles the app sent the window while `frames` frames ran.
fn titles_during(g: &mut Gui, frames: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..frames {
        g.harness.step();
        for vp in g.harness.output().viewport_output.values() {
            for c in &vp.commands {
                if let egui::ViewportCommand::Title(t) = c {
                    out.push(t.clone());
                }
            }
        }
    }
    out
}

#[test]
fn the_title_names_the_bundle() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.harness.run_steps(2);
    assert_eq!(g.state().title(), "bundlescope");
    g.send(Command::Open(b.dir.join("manifest.json")));
    assert_eq!(titles_during(&mut g, 3), ["bundle — bundlescope"]);
    assert_eq!(g.state().title(), "bundle — bundlescope");
    g.finish();
    // Sent once, not every frame.
    assert!(titles_during(&mut g, 5).is_empty());
    g.send(Command::Close);
    assert_eq!(titles_during(&mut g, 3), ["bundlescope"]);
}

/// eframe's storage, in memory.
#[derive(Default)]
struct Memory(HashMap<String, String>);

impl eframe::Storage for Memory {
    fn get_string(&self, key: &str) -> Option<String> {
        self.0.get(key).cloned()
    }
    fn set_string(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), value);
    }
    fn remove_string(&mut self, key: &str) {
        self.0.remove(key);
    }
    fn flush(&mut self) {}
}

#[test]
fn the_last_tab_theme_and_recent_list_survive_a_restart() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    g.send(Command::ShowTab(CentralTab::SpotChecks));
    g.send(Command::SetTheme(ThemePreference::Light));
    g.harness.run_steps(2);
    let recent = g.state().recent().to_vec();
    assert_eq!(recent.len(), 1);
    let mut storage = Memory::default();
    eframe::App::save(g.app(), &mut storage);
    // A new app, as `run` builds it, reads them back.
    let mut again = App::new(None);
    assert_eq!(again.central(), CentralTab::Tensors);
    again.restore(&storage);
    assert_eq!(again.central(), CentralTab::SpotChecks);
    assert_eq!(again.theme(), ThemePreference::Light);
    assert_eq!(again.recent(), recent.as_slice());
    // The restored theme reaches egui on the first frame.
    let mut h =
        egui_kittest::Harness::builder().build_ui_state(|ui, app: &mut App| app.ui(ui), again);
    h.run_steps(2);
    assert_eq!(h.ctx.theme(), egui::Theme::Light);
    // A store without our keys (a first run) keeps the defaults.
    let mut fresh = App::new(None);
    fresh.restore(&Memory::default());
    assert_eq!(fresh.central(), CentralTab::Tensors);
    assert_eq!(fresh.theme(), ThemePreference::System);
}

/// A key picked for a signed folder is remembered across a restart: the
/// app restored from what the last one saved verifies the folder with it,
/// without being given the key again; a fresh store verifies nothing.
#[test]
fn a_key_picked_for_a_folder_survives_a_restart() {
    use bundlescope::app::signing::TrustFile;
    if !common::oms::available() {
        return;
    }
    let s = common::oms::signed(common::oms::How::Key("p256"));
    let mut g = gui();
    g.open(&s.dir);
    assert!(g.shows("signature not checked: no key given"));
    g.pick_signing_file(TrustFile::Key, &s.work.join("pub.pem"));
    assert!(g.shows("3 files, all digests match"), "not verified");
    let mut storage = Memory::default();
    eframe::App::save(g.app(), &mut storage);

    let mut again = App::new(None);
    again.restore(&storage);
    let mut h = Gui::with_app(again);
    h.open(&s.dir);
    assert!(
        h.shows("3 files, all digests match"),
        "the key was forgotten"
    );

    let mut fresh = App::new(None);
    fresh.restore(&Memory::default());
    let mut h = Gui::with_app(fresh);
    h.open(&s.dir);
    assert!(h.shows("signature not checked: no key given"));
    assert!(!h.shows("all digests match"));
}

/// The chart menus on screen, by label.
fn png_menus(g: &Gui) -> Vec<String> {
    g.harness
        .query_all_by_label_contains("chart: PNG")
        .filter_map(|n| label(&n))
        .collect()
}

#[test]
fn every_chart_of_a_tensor_has_a_png_menu() {
    let b = TestBundle::v2();
    let mut g = Gui::new(GuiOptions {
        size: [1280.0, 2000.0],
        ..GuiOptions::default()
    });
    g.open(&b.dir);
    let i = g.select("language_model.model.layers.0.mlp.gate_proj.weight");
    let stats = g.state().session().unwrap().model.stats[i].clone().unwrap();
    let mut want = Vec::new();
    for (has, name) in [
        (stats.codes.is_some(), "codes"),
        (stats.scales.is_some(), "scales"),
        (stats.values.is_some(), "values"),
    ] {
        if has {
            want.push(format!("{name} chart: PNG"));
        }
    }
    assert!(want.len() >= 2, "{want:?}");
    assert_eq!(png_menus(&g), want);
}

#[test]
fn every_nvfp4_chart_has_a_png_menu() {
    let a = Artifact::sample();
    let mut g = Gui::new(GuiOptions {
        size: [1280.0, 2600.0],
        ..GuiOptions::default()
    });
    g.open(&a.dir);
    g.select("model.decoder.layers.1.experts.gate_up_proj.weight");
    // The code counts run on a job; wait until their chart is drawn.
    for _ in 0..2000 {
        g.harness.step();
        if png_menus(&g).iter().any(|l| l.starts_with("E2M1")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let menus = png_menus(&g);
    for chart in [
        "global scales",
        "E2M1 codes",
        "E4M3 scales",
        "layer × expert map",
    ] {
        assert!(
            menus.contains(&format!("{chart} chart: PNG")),
            "{chart} in {menus:?}"
        );
    }
}

/// Runs frames until the chart export is done, returning the pictures the
/// app put on the clipboard meanwhile.
fn finish_export(g: &mut Gui) -> Vec<egui::ColorImage> {
    let mut copied = Vec::new();
    for _ in 0..400 {
        g.harness.step();
        for c in &g.harness.output().platform_output.commands {
            if let egui::OutputCommand::CopyImage(img) = c {
                copied.push(img.clone());
            }
        }
        if !g.state().exporting_chart() {
            g.harness.run_steps(2);
            return copied;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the export never finished");
}

#[test]
fn copy_as_png_puts_the_chart_on_the_clipboard() {
    let b = TestBundle::v2();
    let mut g = Gui::new(GuiOptions {
        size: [1280.0, 2000.0],
        ..GuiOptions::default()
    });
    g.open(&b.dir);
    g.select("language_model.model.layers.0.mlp.gate_proj.weight");
    g.harness.get_by_label("codes chart: PNG").click();
    g.harness.run_steps(2);
    g.harness.get_by_label("Copy as PNG").click();
    let copied = finish_export(&mut g);
    assert_eq!(copied.len(), 1, "one picture copied");
    let img = &copied[0];
    assert_eq!(Some(img.size), g.state().last_copied_chart());
    // The plot's size: as wide as the side panel's content, its height
    // (150 points at one pixel a point) give or take the frame.
    let [w, h] = img.size;
    assert!((250..=720).contains(&w), "{w}");
    assert!((140..=170).contains(&h), "{h}");
    // And it is the chart: the bars' colour is in it, the menu is not.
    let bar = egui::Color32::from_rgb(0x3b, 0x82, 0xc4);
    let bars = img.pixels.iter().filter(|&&p| p == bar).count();
    assert!(bars > 100, "{bars} bar pixels");
    assert!(!g.shows("Copy as PNG"), "the menu closed");
}

#[test]
fn a_chart_saved_as_png_is_written_but_never_into_the_bundle() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    let rect = egui::Rect::from_min_size(egui::pos2(10.0, 20.0), egui::vec2(200.0, 100.0));
    let out = b.tmp.path().join("chart.png");
    g.send(Command::ExportChart(ChartShot {
        name: "codes".into(),
        rect,
        target: ChartTarget::File(out.clone()),
    }));
    finish_export(&mut g);
    let bytes = std::fs::read(&out).expect("the PNG was written");
    let decoded = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    let info = decoded.info();
    assert_eq!((info.width, info.height), (200, 100));
    assert!(g.state().notice().is_some_and(|n| !n.is_error));
    // Inside the bundle folder: refused, nothing written.
    let inside = b.dir.join("chart.png");
    g.send(Command::ExportChart(ChartShot {
        name: "codes".into(),
        rect,
        target: ChartTarget::File(inside.clone()),
    }));
    finish_export(&mut g);
    assert!(!inside.exists());
    assert!(
        g.state()
            .notice()
            .is_some_and(|n| n.is_error && n.message.contains("never writes"))
    );
}

#[test]
fn a_cached_audit_shows_its_date_in_local_time() {
    let b = TestBundle::v2();
    let mut g = gui();
    g.open(&b.dir);
    g.open(&b.dir);
    let date = g.state().session().unwrap().cached.clone().expect("cached");
    // The cache writes UTC; the window shows the local offset with it.
    assert!(date.contains("(UTC"), "{date}");
    assert!(!date.ends_with(" UTC"), "{date}");
    assert!(g.shows(&format!("cached audit of {date}")));
}
