//! The desktop app: one [`App`] whose state is split over panels (one file
//! each, each owning its state). Panels never do I/O or heavy work; they
//! push [`Command`]s that [`App::handle_commands`] carries out in one place.
//! Everything slow runs as a [`jobs::Job`]; each frame polls the jobs within
//! a small time budget and never waits for one.

mod cache;
mod chart_export;
mod commands;
pub mod compare;
mod detail;
mod gguf_meta;
mod histograms;
pub mod jobs;
mod lineage;
mod menu;
mod nvfp4;
mod opening;
mod peer_view;
mod provenance;
mod quality;
mod range_hashes;
mod session;
pub mod shortcuts;
pub mod signing;
mod spotcheck;
mod stream;
mod tensors;
mod welcome;
mod window;

use std::path::{Path, PathBuf};
use std::time::Duration;

use egui::{Color32, RichText, ThemePreference};

pub use cache::AuditCache;
pub use chart_export::{ChartShot, ChartTarget, crop, encode_png};
pub use commands::{Command, Commands, Notice};
pub use compare::{CompareView, ComparedBundle};
pub use lineage::LineageView;
pub use menu::{Overlay, version_text};
pub use nvfp4::{ExpertSort, HeatStat, Nvfp4View};
pub use quality::{QualityPanel, QualityRow, QualitySort, quality_rows};
pub use session::{FileState, LogRow, RowStatus, Session};
pub use spotcheck::{JobKind, SpotView};
pub use tensors::{SortColumn, TablePanel, TableView};
pub use welcome::READS;
pub use window::{date_at, local_date};

use commands::Dialog;
use stream::StreamPanel;
use welcome::Recent;

/// How long one frame may spend applying audit events.
const DRAIN_BUDGET: Duration = Duration::from_millis(4);
/// Most entries kept in the recent-bundles list.
const MAX_RECENT: usize = 8;
/// A cached verdict is re-verified in the background when the payload is
/// at most this big (a few seconds of hashing).
pub const REVERIFY_LIMIT: u64 = 512 << 20;

/// Which view the central panel shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CentralTab {
    /// Every tensor.
    Tensors,
    /// Packed tensors by quality statistics.
    Quality,
    /// MLX spot checks of every tensor.
    SpotChecks,
    /// The provenance chain: source, parent, this bundle, a compared one.
    Lineage,
    /// The open bundle compared with another (Compare with…).
    Compare,
}

/// Which tab the right-hand panel shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SideTab {
    /// The selected tensor.
    Tensor,
    /// Provenance, files and totals.
    Summary,
}

/// The whole app. Its fields are private: tests and callers drive it with
/// [`App::send`] and read it through the accessors below.
pub struct App {
    session: Option<Session>,
    /// Jobs that open, audit and cache the current bundle.
    opening: opening::Opening,
    recent: Recent,
    table: TablePanel,
    selected: Option<usize>,
    stream: StreamPanel,
    side: SideTab,
    central: CentralTab,
    quality: QualityPanel,
    notice: Option<Notice>,
    commands: Commands,
    cache: Option<AuditCache>,
    /// Payload size up to which a cached verdict is re-verified.
    reverify_limit: u64,
    nvfp4: Nvfp4View,
    spot: SpotView,
    lineage: LineageView,
    /// Keys and roots that verify a signed folder, per folder.
    signing: signing::SigningTrust,
    /// Compare with…: bundle B, the diff and its table.
    compare: CompareView,
    /// What the comparison last told the Lineage tab.
    lineage_from_compare: Option<crate::report::lineage::Compared>,
    /// Each tensor's range hash, hashed after the audit.
    range_hashes: range_hashes::RangeHashes,
    dialog: Option<Dialog>,
    ctx: Option<egui::Context>,
    /// The `?` list or About, when shown.
    overlay: Option<menu::Overlay>,
    mlx_version: menu::MlxVersion,
    charts: chart_export::ChartExport,
    /// View → Theme (remembered between runs).
    theme: ThemePreference,
    /// The theme and title last told to the window.
    theme_applied: Option<ThemePreference>,
    title_sent: Option<String>,
}

impl App {
    /// A fresh app with no bundle open.
    pub fn new(cache: Option<AuditCache>) -> Self {
        Self {
            session: None,
            opening: opening::Opening::default(),
            recent: Recent::default(),
            table: TablePanel::default(),
            selected: None,
            stream: StreamPanel::default(),
            side: SideTab::Summary,
            central: CentralTab::Tensors,
            quality: QualityPanel::default(),
            notice: None,
            commands: Commands::default(),
            cache,
            reverify_limit: REVERIFY_LIMIT,
            nvfp4: Nvfp4View::default(),
            spot: SpotView::default(),
            lineage: LineageView::default(),
            signing: signing::SigningTrust::default(),
            compare: CompareView::default(),
            lineage_from_compare: None,
            range_hashes: range_hashes::RangeHashes::default(),
            dialog: None,
            ctx: None,
            overlay: None,
            mlx_version: menu::MlxVersion::default(),
            charts: chart_export::ChartExport::default(),
            theme: ThemePreference::System,
            theme_applied: None,
            title_sent: None,
        }
    }

    /// Sets the payload size up to which a cached verdict is re-verified in
    /// the background (0 never re-verifies; tests of the cache itself).
    pub fn with_reverify_limit(mut self, bytes: u64) -> Self {
        self.reverify_limit = bytes;
        self
    }

    /// Queues a command; it is carried out at the end of the next frame
    /// (or by [`App::handle_commands`]).
    pub fn send(&mut self, c: Command) {
        self.commands.send(c);
    }

    /// The open bundle and its audit, if any.
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// The selected tensor (index into the bundle's tensors).
    pub fn selected(&self) -> Option<usize> {
        self.selected
    }

    /// The rows the tensor table shows, in order.
    pub fn rows(&self) -> &[usize] {
        self.table.rows()
    }

    /// The tensor table's filter and sort.
    pub fn view(&self) -> &TableView {
        &self.table.view
    }

    /// The central tab shown.
    pub fn central(&self) -> CentralTab {
        self.central
    }

    /// The message shown under the top bar.
    pub fn notice(&self) -> Option<&Notice> {
        self.notice.as_ref()
    }

    /// The NVFP4 panel's state.
    pub fn nvfp4(&self) -> &Nvfp4View {
        &self.nvfp4
    }

    /// The spot-check state.
    pub fn spot(&self) -> &SpotView {
        &self.spot
    }

    /// The spot-check state, to change its settings (rows of `x`, dtype) as
    /// the panel's controls do.
    pub fn spot_mut(&mut self) -> &mut SpotView {
        &mut self.spot
    }

    /// The Lineage tab's state (its chain, the picked parent).
    pub fn lineage(&self) -> &LineageView {
        &self.lineage
    }

    /// The Lineage tab's state, to set the compared bundle.
    pub fn lineage_mut(&mut self) -> &mut LineageView {
        &mut self.lineage
    }

    /// The comparison with another bundle (Compare with…); its
    /// [`CompareView::compared`] is bundle B's path and hashes.
    pub fn compare(&self) -> &CompareView {
        &self.compare
    }

    /// Waits (up to `timeout`) until the comparison and the selected diff
    /// row's statistics are in, applying them; the notice it raised, if
    /// any. For tests.
    pub fn wait_for_compare(&mut self, timeout: Duration) -> bool {
        if let Some((m, e)) = self.compare.wait(timeout) {
            self.set_notice(m, e);
        }
        !self.compare.running()
    }

    /// Recently opened bundles, newest first.
    pub fn recent(&self) -> &[PathBuf] {
        self.recent.paths()
    }

    /// The selected tensor's name.
    pub fn selected_name(&self) -> Option<String> {
        let b = self.session.as_ref()?.model.bundle.as_ref()?;
        Some(b.tensors.get(self.selected?)?.name.clone())
    }

    fn set_notice(&mut self, message: impl Into<String>, is_error: bool) {
        self.notice = Some(Notice::new(message, is_error));
    }

    fn remember(&mut self, path: &Path) {
        self.recent.remember(path, self.ctx.clone());
    }

    /// Recomputes the visible rows when the filter, sort or data changed.
    pub fn refresh_rows(&mut self) {
        self.table.refresh(self.session.as_ref());
    }

    /// Keyboard shortcuts that work anywhere in the window: the keys come
    /// from the one table in [`shortcuts`], which the `?` overlay lists.
    fn shortcuts(&mut self, ctx: &egui::Context) {
        use shortcuts::Action;
        let typing = ctx.text_edit_focused();
        for action in shortcuts::pressed(ctx, typing) {
            let tx = &mut self.commands;
            match action {
                Action::Compare => tx.send(Command::PickCompare),
                Action::Open => tx.send(Command::OpenDialog),
                Action::SaveReport => tx.send(Command::SaveReportDialog),
                Action::Close => tx.send(Command::Close),
                Action::Find => self.table.focus_filter = true,
                Action::Escape if self.overlay.is_some() => self.overlay = None,
                Action::Escape => self.table.view.filter.clear(),
                Action::SpotCheckAll => tx.send(Command::SpotCheck(None)),
                Action::SpotCheck => {
                    if self.selected.is_some() {
                        tx.send(Command::SpotCheck(self.selected));
                    }
                }
                Action::CopyName => {
                    if self.selected.is_some() {
                        tx.send(Command::CopySelectedName);
                    }
                }
                // The Compare tab moves its own selection with the arrows.
                Action::Next | Action::Previous if self.central == CentralTab::Compare => {}
                Action::Next | Action::Previous => {
                    let rows = self.table.rows();
                    if rows.is_empty() {
                        continue;
                    }
                    let pos = self
                        .selected
                        .and_then(|s| rows.iter().position(|&r| r == s));
                    let next = match (pos, action == Action::Next) {
                        (None, _) => 0,
                        (Some(p), true) => (p + 1).min(rows.len() - 1),
                        (Some(p), false) => p.saturating_sub(1),
                    };
                    tx.send(Command::Select(rows.get(next).copied()));
                    self.table.scroll_to_selected = true;
                }
                Action::TabTensors => tx.send(Command::ShowTab(CentralTab::Tensors)),
                Action::TabQuality => tx.send(Command::ShowTab(CentralTab::Quality)),
                Action::TabSpotChecks => tx.send(Command::ShowTab(CentralTab::SpotChecks)),
                Action::TabLineage => tx.send(Command::ShowTab(CentralTab::Lineage)),
                Action::Help => tx.send(Command::ShowOverlay(menu::Overlay::Shortcuts)),
                // Handled by their panel (`pressed` does not return them).
                Action::PreviousExpert | Action::NextExpert => {}
            }
        }
    }

    fn drops(&mut self, ui: &mut egui::Ui) {
        let (hovering, dropped, modifiers, pointer) = ui.ctx().input(|i| {
            (
                !i.raw.hovered_files.is_empty(),
                i.raw.dropped_files.first().map(|f| f.path().to_path_buf()),
                i.modifiers,
                i.pointer.latest_pos(),
            )
        });
        // Alt/Option or Shift held, or the Summary tab's drop zone: compare.
        let bundle_open = self
            .session
            .as_ref()
            .is_some_and(|s| s.model.bundle.is_some());
        let compares =
            compare::drop_compares(bundle_open, modifiers, self.compare.over_drop_zone(pointer));
        if let Some(p) = dropped {
            self.commands.send(if compares {
                Command::Compare(p)
            } else {
                Command::Open(p)
            });
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
                if compares {
                    "Drop to compare the open bundle with this one"
                } else if bundle_open {
                    "Drop a bundle folder or a .gguf file to open it (hold Alt/Option or Shift to compare)"
                } else {
                    "Drop a bundle folder (or its manifest.json), or a .gguf file, to open it"
                },
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
        let ctx = ui.ctx().clone();
        self.poll_jobs(DRAIN_BUDGET);
        self.refresh_rows();
        self.shortcuts(&ctx);
        self.window_tick(&ctx);
        self.chart_export_tick(&ctx);
        self.drops(ui);
        egui::Panel::top("menu-bar").show(ui, |ui| self.menu_bar_ui(ui));
        egui::Panel::top("top-bar").show(ui, |ui| self.top_bar_ui(ui));
        if let Some(n) = &self.notice {
            let mut dismiss = false;
            egui::Panel::top("notice").show(ui, |ui| dismiss = commands::notice_ui(ui, n));
            if dismiss {
                self.notice = None;
            }
        }
        let bundle = self.session.as_ref().and_then(|s| s.model.bundle.clone());
        if let (Some(session), Some(bundle)) = (&self.session, bundle) {
            egui::Panel::bottom("stream")
                .resizable(true)
                .default_size(190.0)
                .min_size(90.0)
                .show(ui, |ui| {
                    stream::stream_ui(
                        ui,
                        &mut self.stream,
                        session,
                        &self.spot,
                        &mut self.commands,
                    )
                });
            egui::Panel::right("side")
                .resizable(true)
                .default_size(360.0)
                .min_size(260.0)
                .max_size(720.0)
                .show(ui, |ui| {
                    ui.horizontal(|ui| {
                        ui.selectable_value(&mut self.side, SideTab::Tensor, "Tensor");
                        ui.selectable_value(&mut self.side, SideTab::Summary, "Summary");
                    });
                    ui.separator();
                    egui::ScrollArea::vertical()
                        .auto_shrink([false, false])
                        .show(ui, |ui| match self.side {
                            SideTab::Tensor => detail::detail_ui(
                                ui,
                                session,
                                self.selected,
                                &mut self.spot,
                                &mut self.nvfp4,
                                self.range_hashes.running(),
                                &mut self.commands,
                            ),
                            SideTab::Summary => {
                                provenance::summary_ui(ui, session);
                                provenance::signing_trust_ui(
                                    ui,
                                    session,
                                    &self.signing.for_bundle(&session.path),
                                    &mut self.commands,
                                );
                                compare::summary_ui(ui, &mut self.compare, &mut self.commands);
                            }
                        });
                });
            egui::CentralPanel::default().show(ui, |ui| {
                ui.horizontal(|ui| {
                    ui.selectable_value(&mut self.central, CentralTab::Tensors, "Tensors");
                    ui.selectable_value(&mut self.central, CentralTab::Quality, "Quality");
                    ui.selectable_value(&mut self.central, CentralTab::SpotChecks, "Spot checks");
                    ui.selectable_value(&mut self.central, CentralTab::Lineage, "Lineage");
                    if self.compare.active() {
                        ui.selectable_value(&mut self.central, CentralTab::Compare, "Compare");
                    }
                });
                if self.table.focus_filter
                    || (self.central == CentralTab::Compare && !self.compare.active())
                {
                    self.central = CentralTab::Tensors;
                }
                match self.central {
                    CentralTab::Tensors => tensors::table_ui(
                        ui,
                        &mut self.table,
                        session,
                        &bundle,
                        self.selected,
                        &mut self.commands,
                    ),
                    CentralTab::Quality => quality::quality_ui(
                        ui,
                        &mut self.quality,
                        session,
                        &bundle,
                        self.selected,
                        &mut self.commands,
                    ),
                    CentralTab::SpotChecks => {
                        spotcheck::central_ui(ui, &mut self.spot, Some(&bundle), &mut self.commands)
                    }
                    CentralTab::Lineage => {
                        lineage::lineage_ui(ui, &mut self.lineage, session, &mut self.commands)
                    }
                    CentralTab::Compare => {
                        compare::compare_ui(ui, &mut self.compare, &mut self.commands)
                    }
                }
            });
        } else {
            egui::CentralPanel::default().show(ui, |ui| {
                welcome::welcome_ui(
                    ui,
                    &self.recent,
                    self.opening.busy_label(),
                    &mut self.commands,
                )
            });
        }
        self.overlay_ui(&ctx);
        self.handle_commands();
        if self.session.as_ref().is_some_and(Session::running)
            || self.spot.running()
            || self.compare.running()
            || self.opening.busy()
            || self.charts.busy()
        {
            // Workers wake us on each message; this only keeps ETA text fresh.
            ui.ctx().request_repaint_after(Duration::from_millis(250));
        }
    }

    fn top_bar_ui(&mut self, ui: &mut egui::Ui) {
        let audited = self.audited();
        let tx = &mut self.commands;
        ui.horizontal(|ui| {
            if ui
                .button("Open…")
                .on_hover_text(format!(
                    "Open a bundle folder ({})",
                    shortcuts::text(ui.ctx(), shortcuts::Action::Open)
                ))
                .clicked()
            {
                tx.send(Command::OpenDialog);
            }
            let Some(s) = &self.session else {
                ui.label(RichText::new("bundlescope").strong());
                if let Some(label) = self.opening.busy_label() {
                    ui.spinner();
                    ui.label(label);
                }
                return;
            };
            // The folder's name, as a Mac title bar shows it; the full path on hover.
            let name = window::display_name(&s.path);
            ui.label(RichText::new(name).monospace().strong())
                .on_hover_text(s.path.display().to_string());
            if let Some(b) = &s.model.bundle {
                ui.label(RichText::new(b.format.short()).weak());
            } else if s.running() {
                ui.spinner();
                ui.label("Opening…");
            }
            if badge_ui(ui, s) {
                tx.send(Command::ShowFirstError);
            }
            if let Some(date) = &s.cached {
                ui.label(RichText::new(format!("cached audit of {date}")).weak())
                    .on_hover_text(
                        "The files are unchanged since this audit (same size, mtime, ctime, device and inode)",
                    );
            }
            if self.opening.reverifying() {
                ui.spinner();
                ui.label(RichText::new("re-verifying…").weak())
                    .on_hover_text("Hashing the files again in the background");
            }
            // Only an audited bundle has a report to save and an audit to repeat.
            if !audited {
                return;
            }
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                if ui.button("Save report…").clicked() {
                    tx.send(Command::SaveReportDialog);
                }
                if ui
                    .button("Re-verify")
                    .on_hover_text("Run the full audit again")
                    .clicked()
                {
                    tx.send(Command::Reverify);
                }
            });
        });
    }
}

/// Draws the verdict badge; true when an Invalid badge was clicked (to
/// show the first failing tensor).
fn badge_ui(ui: &mut egui::Ui, s: &Session) -> bool {
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
    let invalid = matches!(&s.model.outcome, Some(Ok(o)) if !o.valid);
    let label = RichText::new(format!("{mark} {text}")).color(fg).strong();
    if invalid {
        return ui
            .add(egui::Button::new(label).fill(fill).corner_radius(8.0))
            .on_hover_text("Show the first failing tensor")
            .clicked();
    }
    egui::Frame::new()
        .fill(fill)
        .corner_radius(8.0)
        .inner_margin(egui::Margin::symmetric(8, 2))
        .show(ui, |ui| {
            ui.label(label);
        });
    false
}

impl eframe::App for App {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        App::ui(self, ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        self.save_to(storage);
    }
}

/// What the window shows first.
#[derive(Debug, Clone)]
pub enum Start {
    /// The welcome screen.
    Welcome,
    /// The demo bundle.
    Demo,
    /// The demo's calibrated GPTQ-Q4 overlay, its parent beside it.
    DemoOverlay,
    /// This bundle.
    Open(PathBuf),
    /// The first bundle, compared with the second (Compare with…).
    Compare(PathBuf, PathBuf),
}

/// Opens the window and runs until it is closed.
pub fn run(start: Start) -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("bundlescope")
            .with_inner_size([1280.0, 820.0])
            .with_min_inner_size([720.0, 480.0])
            .with_drag_and_drop(true),
        // Size and position come back from the last run (eframe's storage).
        persist_window: true,
        ..Default::default()
    };
    eframe::run_native(
        "bundlescope",
        options,
        Box::new(move |cc| {
            let mut app = App::new(AuditCache::default_location());
            app.ctx = Some(cc.egui_ctx.clone());
            if let Some(storage) = cc.storage {
                app.restore(storage);
            }
            match start {
                Start::Welcome => {}
                Start::Demo => app.send(Command::OpenDemo),
                Start::DemoOverlay => {
                    app.send(Command::OpenDemoOverlay);
                    app.central = CentralTab::Lineage;
                }
                Start::Open(p) => app.send(Command::Open(p)),
                Start::Compare(a, b) => {
                    app.send(Command::Open(a));
                    app.send(Command::Compare(b));
                }
            }
            app.handle_commands();
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| anyhow::anyhow!("could not open the window: {e}"))
}
