//! The desktop app: one [`App`] whose state is split over panels (one file
//! each). Panels never do I/O or heavy work; they push [`Command`]s that
//! [`App::handle_commands`] carries out in one place. The audit runs on its
//! worker; each frame drains its channel within a small time budget.

mod cache;
mod detail;
mod histograms;
mod nvfp4;
mod provenance;
mod quality;
mod session;
mod spotcheck;
mod stream;
mod tensors;
mod welcome;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::{Duration, Instant};

use egui::{Color32, Key, KeyboardShortcut, Modifiers, RichText};

use crate::audit::{self, Event, Failure};

pub use cache::AuditCache;
pub use nvfp4::{ExpertSort, HeatStat, Nvfp4View};
pub use quality::{QualitySort, quality_rows};
pub use session::{LogRow, RowStatus, Session};
pub use spotcheck::{JobKind, SpotView};
pub use tensors::SortColumn;

/// How long one frame may spend applying audit events.
const DRAIN_BUDGET: Duration = Duration::from_millis(4);
/// Most entries kept in the recent-bundles list.
const MAX_RECENT: usize = 8;
/// Storage key of the recent list.
const RECENT_KEY: &str = "bundlescope.recent";

/// Something a panel asks the app to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Open this folder (or manifest) and audit it.
    Open(PathBuf),
    /// Open the built-in demo bundle.
    OpenDemo,
    /// Show the folder picker.
    OpenDialog,
    /// Run the full audit again, ignoring the cache.
    Reverify,
    /// Ask where to save the JSON report.
    SaveReportDialog,
    /// Write the JSON report to this file.
    SaveReport(PathBuf),
    /// Select a tensor (index into the bundle's tensors).
    Select(Option<usize>),
    /// Copy the selected tensor's name.
    CopySelectedName,
    /// Spot-check this tensor on MLX, or every packed tensor (`None`).
    SpotCheck(Option<usize>),
    /// Show the folder picker for the reference checkpoint.
    PickReference,
    /// Open this folder as the reference checkpoint.
    SetReference(PathBuf),
}

/// The filter and sort of the tensor table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableView {
    /// Substring filter on names.
    pub filter: String,
    /// Precisions to show; empty shows all.
    pub precisions: BTreeSet<String>,
    /// Sort column.
    pub sort: SortColumn,
    /// Ascending?
    pub ascending: bool,
}

impl Default for TableView {
    fn default() -> Self {
        Self {
            filter: String::new(),
            precisions: BTreeSet::new(),
            sort: SortColumn::Offset,
            ascending: true,
        }
    }
}

/// Which view the central panel shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CentralTab {
    /// Every tensor.
    Tensors,
    /// Packed tensors by quality statistics.
    Quality,
    /// MLX spot checks of every tensor.
    SpotChecks,
}

/// Which tab the right-hand panel shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideTab {
    /// The selected tensor.
    Tensor,
    /// Provenance, files and totals.
    Summary,
}

/// The whole app.
pub struct App {
    /// The open bundle, if any.
    pub session: Option<Session>,
    /// Recently opened bundles, newest first.
    pub recent: Vec<PathBuf>,
    /// Table filter and sort.
    pub view: TableView,
    /// Rows shown, in order (indices into the bundle's tensors).
    pub rows: Vec<usize>,
    rows_key: Option<(TableView, usize, usize)>,
    /// Selected tensor.
    pub selected: Option<usize>,
    /// Scroll the table to the selection on the next frame.
    scroll_to_selected: bool,
    /// Give the filter box focus on the next frame.
    focus_filter: bool,
    /// Stream panel shows only errors.
    pub errors_only: bool,
    /// Right panel tab.
    pub side: SideTab,
    /// Central view.
    pub central: CentralTab,
    /// Quality table sort.
    pub quality_sort: QualitySort,
    /// Quality table order.
    pub quality_ascending: bool,
    /// A message for the user (errors of dialogs, saves…).
    pub notice: Option<(String, bool)>,
    /// Queued commands from the panels.
    pub commands: Vec<Command>,
    /// Where finished audits are remembered.
    pub cache: Option<AuditCache>,
    /// The NVFP4 expert panel's picker, map and counts.
    pub nvfp4: Nvfp4View,
    /// MLX spot checks of the open bundle.
    pub spot: SpotView,
    dialog: Option<Receiver<DialogResult>>,
    ctx: Option<egui::Context>,
}

#[derive(Debug, Clone, Copy)]
enum DialogKind {
    Open,
    Save,
    Reference,
}

enum DialogResult {
    Open(Option<PathBuf>),
    Save(Option<PathBuf>),
    Reference(Option<PathBuf>),
}

impl App {
    /// A fresh app with no bundle open.
    pub fn new(cache: Option<AuditCache>) -> Self {
        Self {
            session: None,
            recent: Vec::new(),
            view: TableView::default(),
            rows: Vec::new(),
            rows_key: None,
            selected: None,
            scroll_to_selected: false,
            focus_filter: false,
            errors_only: false,
            side: SideTab::Summary,
            central: CentralTab::Tensors,
            quality_sort: QualitySort::Suspicion,
            quality_ascending: false,
            notice: None,
            commands: Vec::new(),
            cache,
            nvfp4: Nvfp4View::default(),
            spot: SpotView::default(),
            dialog: None,
            ctx: None,
        }
    }

    /// Opens `path`: from the cache when it holds an audit of exactly these
    /// files, else by starting the audit worker.
    pub fn open(&mut self, path: PathBuf, use_cache: bool) {
        if let Some(mut old) = self.session.take()
            && let Some(h) = old.handle.take()
        {
            h.cancel.cancel();
        }
        self.selected = None;
        self.rows_key = None;
        self.notice = None;
        self.side = SideTab::Summary;
        self.spot.reset();
        self.remember(&path);
        let mut session = Session::new(path.clone());
        if use_cache
            && let Some(cache) = &self.cache
            && let Some(events) = cache.load(&path)
        {
            session.cached = Some(events.date.clone());
            for e in &events.events {
                session.apply(e);
            }
            session.model.passed = events.passed;
            self.session = Some(session);
            return;
        }
        let wake = self
            .ctx
            .clone()
            .map(|ctx| Box::new(move || ctx.request_repaint()) as Box<dyn Fn() + Send + Sync>);
        match audit::spawn(path, audit::Options::default(), wake) {
            Ok(h) => session.handle = Some(h),
            Err(e) => self.notice = Some((format!("could not start the audit: {e}"), true)),
        }
        self.session = Some(session);
    }

    /// Shows an already opened bundle's index without auditing it (headless
    /// benchmarks, and callers that only browse).
    pub fn show_index(&mut self, bundle: std::sync::Arc<crate::format::Bundle>) {
        let mut session = Session::new(bundle.dir.clone());
        session.apply(&Event::Opened(bundle));
        self.session = Some(session);
        self.selected = None;
        self.rows_key = None;
    }

    fn remember(&mut self, path: &Path) {
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        self.recent.retain(|p| p != &path);
        self.recent.insert(0, path);
        self.recent.truncate(MAX_RECENT);
    }

    /// Applies pending audit events, spending at most `budget`.
    pub fn drain_events(&mut self, budget: Duration) {
        let deadline = Instant::now() + budget;
        let Some(session) = &mut self.session else {
            return;
        };
        let Some(handle) = &session.handle else {
            return;
        };
        let mut finished = false;
        let mut events = Vec::new();
        while Instant::now() < deadline {
            match handle.events.try_recv() {
                Ok(e) => {
                    finished |= matches!(e, Event::Finished(_));
                    events.push(e);
                    if finished {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        for e in &events {
            session.apply(e);
        }
        if finished {
            session.handle = None;
            if let (Some(cache), Some(Ok(_))) = (&self.cache, &session.model.outcome) {
                cache.store(&session.path, &session.model);
            }
            if let Some(Err(Failure::Open(e))) = &session.model.outcome {
                self.notice = Some((crate::format::error_chain(&**e), true));
            }
        }
        if !events.is_empty() {
            self.rows_key = None;
        }
    }

    /// Waits (up to `timeout`) until the running audit finishes, applying its
    /// events. For tests and the headless bench.
    pub fn wait_for_audit(&mut self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            self.drain_events(Duration::from_millis(50));
            match &self.session {
                Some(s) if s.running() => std::thread::sleep(Duration::from_millis(2)),
                _ => return true,
            }
        }
        false
    }

    /// Carries out queued commands.
    pub fn handle_commands(&mut self) {
        for cmd in std::mem::take(&mut self.commands) {
            match cmd {
                Command::Open(p) => self.open(p, true),
                Command::OpenDemo => match crate::sample::demo_bundle() {
                    Ok(p) => self.open(p, true),
                    Err(e) => {
                        self.notice =
                            Some((format!("could not write the demo bundle: {e:#}"), true))
                    }
                },
                Command::OpenDialog => self.start_dialog_kind(DialogKind::Open),
                Command::SaveReportDialog => self.start_dialog_kind(DialogKind::Save),
                Command::Reverify => {
                    if let Some(s) = &self.session {
                        let p = s.path.clone();
                        self.open(p, false);
                    }
                }
                Command::SaveReport(path) => self.save_report(&path),
                Command::Select(i) => {
                    self.selected = i;
                    if i.is_some() {
                        self.side = SideTab::Tensor;
                    }
                }
                Command::CopySelectedName => {
                    if let (Some(name), Some(ctx)) = (self.selected_name(), &self.ctx) {
                        ctx.copy_text(name);
                    }
                }
                Command::SpotCheck(which) => {
                    let Some(bundle) = self.session.as_ref().and_then(|s| s.model.bundle.clone())
                    else {
                        continue;
                    };
                    match which {
                        Some(i) if spotcheck::checkable(&bundle, i) => {
                            self.spot.run_tensor(bundle, i, self.ctx.clone())
                        }
                        Some(_) => {}
                        None => {
                            self.central = CentralTab::SpotChecks;
                            self.spot.run_all(bundle, self.ctx.clone());
                        }
                    }
                }
                Command::PickReference => self.start_dialog_kind(DialogKind::Reference),
                Command::SetReference(dir) => {
                    self.spot.open_reference(dir, self.ctx.clone());
                    self.central = CentralTab::SpotChecks;
                }
            }
        }
    }

    /// The selected tensor's name.
    pub fn selected_name(&self) -> Option<String> {
        let b = self.session.as_ref()?.model.bundle.as_ref()?;
        Some(b.tensors.get(self.selected?)?.name.clone())
    }

    fn save_report(&mut self, path: &Path) {
        let Some(s) = &self.session else { return };
        let Some(report) = s.model.report(&s.path.display().to_string()) else {
            self.notice = Some(("nothing to save yet".into(), true));
            return;
        };
        if path.starts_with(&s.path) {
            self.notice = Some((
                "bundlescope never writes into the bundle folder; choose another place".into(),
                true,
            ));
            return;
        }
        let result = serde_json::to_vec_pretty(&report)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(path, bytes));
        self.notice = Some(match result {
            Ok(()) => (format!("report saved to {}", path.display()), false),
            Err(e) => (format!("could not save {}: {e}", path.display()), true),
        });
    }

    fn start_dialog_kind(&mut self, kind: DialogKind) {
        if self.dialog.is_some() {
            return;
        }
        let (tx, rx) = sync_channel(1);
        let ctx = self.ctx.clone();
        let spawned = std::thread::Builder::new()
            .name("bundlescope-dialog".into())
            .spawn(move || {
                let result = match kind {
                    DialogKind::Open => DialogResult::Open(
                        rfd::FileDialog::new()
                            .set_title("Open bundle folder")
                            .pick_folder(),
                    ),
                    DialogKind::Save => DialogResult::Save(
                        rfd::FileDialog::new()
                            .set_title("Save report")
                            .set_file_name("bundlescope-report.json")
                            .save_file(),
                    ),
                    DialogKind::Reference => DialogResult::Reference(
                        rfd::FileDialog::new()
                            .set_title("Choose the reference checkpoint folder")
                            .pick_folder(),
                    ),
                };
                let _ = tx.send(result);
                if let Some(c) = ctx {
                    c.request_repaint();
                }
            });
        match spawned {
            Ok(_) => self.dialog = Some(rx),
            Err(e) => self.notice = Some((format!("could not open a file dialog: {e}"), true)),
        }
    }

    fn poll_dialog(&mut self) {
        let Some(rx) = &self.dialog else { return };
        let Ok(result) = rx.try_recv() else { return };
        self.dialog = None;
        match result {
            DialogResult::Open(Some(p)) => self.commands.push(Command::Open(p)),
            DialogResult::Save(Some(p)) => self.commands.push(Command::SaveReport(p)),
            DialogResult::Reference(Some(p)) => self.commands.push(Command::SetReference(p)),
            DialogResult::Open(None) | DialogResult::Save(None) | DialogResult::Reference(None) => {
                if cfg!(target_os = "linux") {
                    self.notice = Some((
                        "No folder chosen. If no dialog appeared, no xdg-desktop-portal answered: drop the folder on the window, or run `bundlescope DIR`.".into(),
                        false,
                    ));
                }
            }
        }
    }

    /// Recomputes the visible rows when the filter, sort or data changed.
    pub fn refresh_rows(&mut self) {
        let Some(s) = &self.session else {
            self.rows.clear();
            return;
        };
        let Some(b) = &s.model.bundle else {
            self.rows.clear();
            return;
        };
        let key = (self.view.clone(), b.tensors.len(), s.log.len());
        if self.rows_key.as_ref() == Some(&key) {
            return;
        }
        self.rows = tensors::visible_rows(s, b, &self.view);
        self.rows_key = Some(key);
    }

    /// Keyboard shortcuts that work anywhere in the window.
    fn shortcuts(&mut self, ctx: &egui::Context) {
        let cmd = |k| KeyboardShortcut::new(Modifiers::COMMAND, k);
        let filter_has_focus = ctx.memory(|m| m.has_focus(tensors::filter_id()));
        ctx.input_mut(|i| {
            if i.consume_shortcut(&cmd(Key::O)) {
                self.commands.push(Command::OpenDialog);
            }
            if i.consume_shortcut(&cmd(Key::F)) {
                self.focus_filter = true;
            }
            if i.consume_shortcut(&cmd(Key::S)) {
                self.commands.push(Command::SaveReportDialog);
            }
            // Shift+Cmd+K first: consume_shortcut ignores extra modifiers.
            if i.consume_shortcut(&spotcheck::run_all_shortcut()) {
                self.commands.push(Command::SpotCheck(None));
            }
            if i.consume_shortcut(&spotcheck::run_shortcut()) && self.selected.is_some() {
                self.commands.push(Command::SpotCheck(self.selected));
            }
            if !filter_has_focus {
                // Copy arrives as an event (the platform turns Cmd/Ctrl+C into it).
                let copy = i.events.iter().any(|e| matches!(e, egui::Event::Copy))
                    || i.consume_shortcut(&cmd(Key::C));
                if copy && self.selected.is_some() {
                    self.commands.push(Command::CopySelectedName);
                }
            }
            if i.key_pressed(Key::Escape) {
                self.view.filter.clear();
            }
            let down = i.key_pressed(Key::ArrowDown);
            let up = i.key_pressed(Key::ArrowUp);
            if (down || up) && !self.rows.is_empty() {
                let pos = self
                    .selected
                    .and_then(|s| self.rows.iter().position(|&r| r == s));
                let next = match (pos, down) {
                    (None, _) => 0,
                    (Some(p), true) => (p + 1).min(self.rows.len() - 1),
                    (Some(p), false) => p.saturating_sub(1),
                };
                self.commands
                    .push(Command::Select(self.rows.get(next).copied()));
                self.scroll_to_selected = true;
            }
        });
    }

    fn drops(&mut self, ui: &mut egui::Ui) {
        let (hovering, dropped) = ui.ctx().input(|i| {
            (
                !i.raw.hovered_files.is_empty(),
                i.raw.dropped_files.first().map(|f| f.path().to_path_buf()),
            )
        });
        if let Some(p) = dropped {
            self.commands.push(Command::Open(p));
        }
        if hovering {
            let rect = ui.ctx().content_rect();
            let painter = ui.ctx().layer_painter(egui::LayerId::new(
                egui::Order::Foreground,
                egui::Id::unique("drop-overlay"),
            ));
            painter.rect_filled(rect, 0.0, Color32::from_black_alpha(170));
            painter.text(
                rect.center(),
                egui::Align2::CENTER_CENTER,
                "Drop a bundle folder (or its manifest.json) to open it",
                egui::FontId::proportional(22.0),
                Color32::WHITE,
            );
        }
    }

    /// Draws one frame: the whole window.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        if self.ctx.is_none() {
            self.ctx = Some(ui.ctx().clone());
        }
        self.drain_events(DRAIN_BUDGET);
        self.spot.poll();
        self.poll_dialog();
        self.refresh_rows();
        self.shortcuts(&ui.ctx().clone());
        self.drops(ui);
        egui::Panel::top("top-bar").show(ui, |ui| self.top_bar_ui(ui));
        if let Some((msg, error)) = self.notice.clone() {
            egui::Panel::top("notice").show(ui, |ui| {
                ui.horizontal(|ui| {
                    let color = if error {
                        ui.visuals().error_fg_color
                    } else {
                        ui.visuals().text_color()
                    };
                    ui.label(RichText::new(msg).color(color));
                    if ui.small_button("×").on_hover_text("Dismiss").clicked() {
                        self.notice = None;
                    }
                });
            });
        }
        if self
            .session
            .as_ref()
            .is_some_and(|s| s.model.bundle.is_some())
        {
            egui::Panel::bottom("stream")
                .resizable(true)
                .default_size(190.0)
                .min_size(90.0)
                .show(ui, |ui| stream::stream_ui(self, ui));
            egui::Panel::right("side")
                .resizable(true)
                .default_size(360.0)
                .min_size(260.0)
                .max_size(720.0)
                .show(ui, |ui| self.side_ui(ui));
            egui::CentralPanel::default().show(ui, |ui| {
                ui.horizontal(|ui| {
                    ui.selectable_value(&mut self.central, CentralTab::Tensors, "Tensors");
                    ui.selectable_value(&mut self.central, CentralTab::Quality, "Quality");
                    ui.selectable_value(&mut self.central, CentralTab::SpotChecks, "Spot checks");
                });
                let focus = std::mem::take(&mut self.focus_filter);
                if focus {
                    self.central = CentralTab::Tensors;
                }
                let scroll = std::mem::take(&mut self.scroll_to_selected);
                match self.central {
                    CentralTab::Tensors => tensors::table_ui(self, ui, focus, scroll),
                    CentralTab::Quality => quality::quality_ui(self, ui),
                    CentralTab::SpotChecks => spotcheck::central_ui(self, ui),
                }
            });
        } else {
            egui::CentralPanel::default().show(ui, |ui| welcome::welcome_ui(self, ui));
        }
        self.handle_commands();
        if self.session.as_ref().is_some_and(Session::running) || self.spot.running() {
            // The worker wakes us on each event; this only keeps ETA text fresh.
            ui.ctx().request_repaint_after(Duration::from_millis(250));
        }
    }

    fn top_bar_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            if ui
                .button("Open…")
                .on_hover_text(format!(
                    "Open a bundle folder ({})",
                    ui.ctx()
                        .format_shortcut(&KeyboardShortcut::new(Modifiers::COMMAND, Key::O))
                ))
                .clicked()
            {
                self.commands.push(Command::OpenDialog);
            }
            let Some(s) = &self.session else {
                ui.label(RichText::new("bundlescope").strong());
                return;
            };
            // The folder's name, as a Mac title bar shows it; the full path on hover.
            let name = s
                .path
                .file_name()
                .filter(|n| *n != "manifest.json")
                .or_else(|| s.path.parent().and_then(Path::file_name))
                .map_or_else(
                    || s.path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
            ui.label(RichText::new(name).monospace().strong())
                .on_hover_text(s.path.display().to_string());
            if let Some(b) = &s.model.bundle {
                ui.label(RichText::new(b.format.short()).weak());
            }
            badge_ui(ui, s);
            if let Some(date) = &s.cached {
                ui.label(RichText::new(format!("cached audit of {date}")).weak())
                    .on_hover_text(
                        "The files are unchanged since this audit (same size, mtime and inode)",
                    );
            }
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                let done = !s.running();
                if ui
                    .add_enabled(done, egui::Button::new("Save report…"))
                    .clicked()
                {
                    self.commands.push(Command::SaveReportDialog);
                }
                if ui
                    .add_enabled(done, egui::Button::new("Re-verify"))
                    .on_hover_text("Run the full audit again")
                    .clicked()
                {
                    self.commands.push(Command::Reverify);
                }
            });
        });
    }

    fn side_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.selectable_value(&mut self.side, SideTab::Tensor, "Tensor");
            ui.selectable_value(&mut self.side, SideTab::Summary, "Summary");
        });
        ui.separator();
        egui::ScrollArea::vertical()
            .auto_shrink([false, false])
            .show(ui, |ui| match self.side {
                SideTab::Tensor => detail::detail_ui(self, ui),
                SideTab::Summary => provenance::summary_ui(self, ui),
            });
    }
}

fn badge_ui(ui: &mut egui::Ui, s: &Session) {
    let text = s.verdict_text();
    let (fill, fg) = match &s.model.outcome {
        None => (
            ui.visuals().widgets.inactive.bg_fill,
            ui.visuals().text_color(),
        ),
        Some(Ok(o)) if o.valid => (Color32::from_rgb(0x1e, 0x8e, 0x3e), Color32::WHITE),
        Some(_) => (Color32::from_rgb(0xc6, 0x28, 0x28), Color32::WHITE),
    };
    let mark = match &s.model.outcome {
        None => "…",
        Some(Ok(o)) if o.valid => "✔",
        Some(_) => "✖",
    };
    egui::Frame::new()
        .fill(fill)
        .corner_radius(8.0)
        .inner_margin(egui::Margin::symmetric(8, 2))
        .show(ui, |ui| {
            ui.label(RichText::new(format!("{mark} {text}")).color(fg).strong());
        });
}

impl eframe::App for App {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        App::ui(self, ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, RECENT_KEY, &self.recent);
    }
}

/// What the window shows first.
#[derive(Debug, Clone)]
pub enum Start {
    /// The welcome screen.
    Welcome,
    /// The demo bundle.
    Demo,
    /// This bundle.
    Open(PathBuf),
}

/// Opens the window and runs until it is closed.
pub fn run(start: Start) -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("bundlescope")
            .with_inner_size([1280.0, 820.0])
            .with_min_inner_size([720.0, 480.0])
            .with_drag_and_drop(true),
        ..Default::default()
    };
    eframe::run_native(
        "bundlescope",
        options,
        Box::new(move |cc| {
            let mut app = App::new(AuditCache::default_location());
            app.ctx = Some(cc.egui_ctx.clone());
            if let Some(storage) = cc.storage {
                app.recent = eframe::get_value(storage, RECENT_KEY).unwrap_or_default();
            }
            match start {
                Start::Welcome => {}
                Start::Demo => app.commands.push(Command::OpenDemo),
                Start::Open(p) => app.commands.push(Command::Open(p)),
            }
            app.handle_commands();
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| anyhow::anyhow!("could not open the window: {e}"))
}
