//! What panels ask for and where it is carried out: [`Command`]s queue up
//! during a frame and [`App::handle_commands`] runs them at its end. Slow
//! ones (dialogs, the demo bundle, saving a report) start a job; its result
//! comes back through [`App::poll_jobs`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use egui::RichText;

use super::jobs::{Job, Poll};
use super::{App, CentralTab, SideTab, spotcheck};

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
    /// Sort the tensor table by this column, ascending or not.
    SortTable(super::SortColumn, bool),
    /// Copy the selected tensor's name.
    CopySelectedName,
    /// Show this expert in the NVFP4 panel (`None`: all of them).
    PickExpert(Option<usize>),
    /// Colour the NVFP4 layer × expert map by this statistic.
    HeatStat(super::HeatStat),
    /// Spot-check this tensor on MLX, or every packed tensor (`None`).
    SpotCheck(Option<usize>),
    /// Stop the running spot check after its current tensor.
    CancelSpotCheck,
    /// Show the folder picker for the reference checkpoint.
    PickReference,
    /// Open this folder as the reference checkpoint.
    SetReference(PathBuf),
    /// Forget the reference checkpoint (and the results measured with it).
    ClearReference,
    /// Close the open bundle (back to the welcome screen).
    Close,
    /// Show this central tab.
    ShowTab(CentralTab),
    /// Show this tab of the right-hand panel.
    ShowSide(SideTab),
    /// Use this theme (View → Theme).
    SetTheme(egui::ThemePreference),
    /// Show the shortcuts list or About.
    ShowOverlay(super::Overlay),
    /// Select the first tensor with an error and scroll the table to it.
    ShowFirstError,
    /// Copy or save a chart as PNG.
    ExportChart(super::ChartShot),
    /// Open the built-in demo's calibrated GPTQ-Q4 overlay (its parent, the
    /// demo bundle, beside it).
    OpenDemoOverlay,
    /// Show the file picker for a public key (PEM) or root certificate
    /// that verifies the open bundle's OMS signature.
    PickSigningFile(super::signing::TrustFile),
    /// Remember this key or root for the open bundle's folder and audit it
    /// again with it.
    SetSigningFile(super::signing::TrustFile, PathBuf),
    /// Forget the keys and roots of the open bundle's folder.
    ForgetSigningFiles,
    /// Show the folder picker for the open overlay's parent bundle.
    PickParent,
    /// Audit the open overlay again against this parent folder.
    SetParent(PathBuf),
    /// Show the folder picker for a bundle to compare the open one with.
    PickCompare,
    /// Compare the open bundle (A) with this one (B), on a job.
    Compare(PathBuf),
    /// Stop the running comparison.
    CancelCompare,
    /// Forget the comparison.
    CloseCompare,
    /// Select a row of the diff table (index into the diff report's tensors).
    SelectDiffRow(Option<usize>),
    /// Ask where to save the comparison (JSON or Markdown by extension).
    SaveDiffReportDialog,
    /// Write the comparison to this file.
    SaveDiffReport(PathBuf),
}

/// The queue panels push commands into: the only way a panel changes what
/// lies outside its own state.
#[derive(Debug, Default)]
pub struct Commands(Vec<Command>);

impl Commands {
    /// Queues `c` for the end of the frame.
    pub fn send(&mut self, c: Command) {
        self.0.push(c);
    }

    fn take(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.0)
    }
}

/// A message for the user under the top bar.
#[derive(Debug, Clone)]
pub struct Notice {
    /// What to say.
    pub message: String,
    /// Shown in the error colour.
    pub is_error: bool,
    /// When it was raised.
    pub when: Instant,
}

impl Notice {
    /// A notice raised now.
    pub fn new(message: impl Into<String>, is_error: bool) -> Self {
        Self {
            message: message.into(),
            is_error,
            when: Instant::now(),
        }
    }
}

/// Draws a notice; true when the user dismissed it.
pub(super) fn notice_ui(ui: &mut egui::Ui, n: &Notice) -> bool {
    let mut dismiss = false;
    ui.horizontal(|ui| {
        let color = if n.is_error {
            ui.visuals().error_fg_color
        } else {
            ui.visuals().text_color()
        };
        ui.label(RichText::new(&n.message).color(color));
        dismiss = ui.small_button("×").on_hover_text("Dismiss").clicked();
    });
    dismiss
}

#[derive(Debug, Clone, Copy)]
enum DialogKind {
    SigningKey,
    CertRoot,
    Open,
    Save,
    Reference,
    Parent,
    Compare,
    SaveDiff,
}

/// A file dialog (or another one-shot job whose answer is a path to act
/// on) in flight.
pub(super) struct Dialog {
    kind: DialogKind,
    job: Job<Option<PathBuf>>,
}

/// What a one-shot disk job reports back.
pub(super) enum Chore {
    /// The demo bundle is written here (or could not be).
    Demo(Result<PathBuf, String>),
    /// The report was saved (message) or not (error).
    Saved(Result<String, String>),
}

impl App {
    /// Carries out queued commands.
    pub fn handle_commands(&mut self) {
        for cmd in self.commands.take() {
            match cmd {
                Command::Open(p) => self.open(p, true),
                Command::OpenDemo => self.start_chore("demo", |_| {
                    Chore::Demo(crate::sample::demo_bundle().map_err(|e| format!("{e:#}")))
                }),
                Command::OpenDialog => self.start_dialog(DialogKind::Open),
                Command::SaveReportDialog if !self.audited() => {
                    self.set_notice("nothing audited yet: no report to save", false)
                }
                Command::SaveReportDialog => self.start_dialog(DialogKind::Save),
                Command::Reverify => {
                    if let Some(s) = self.session.as_ref().filter(|_| self.audited()) {
                        let p = s.path.clone();
                        self.open(p, false);
                    }
                }
                Command::SaveReport(path) => self.save_report(path),
                Command::Select(i) => {
                    self.selected = i;
                    if i.is_some() {
                        self.side = SideTab::Tensor;
                    }
                }
                Command::SortTable(column, ascending) => {
                    self.table.view.sort = column;
                    self.table.view.ascending = ascending;
                }
                Command::PickExpert(e) => self.nvfp4.expert = e,
                Command::HeatStat(stat) => self.nvfp4.heat_stat = stat,
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
                Command::CancelSpotCheck => self.spot.cancel(),
                Command::PickReference => self.start_dialog(DialogKind::Reference),
                Command::SetReference(dir) => {
                    self.spot.open_reference(dir, self.ctx.clone());
                    self.central = CentralTab::SpotChecks;
                }
                Command::ClearReference => self.spot.clear_reference(),
                Command::Close => self.close(),
                Command::ShowTab(tab) => self.central = tab,
                Command::ShowSide(tab) => self.side = tab,
                Command::SetTheme(t) => self.theme = t,
                Command::ShowOverlay(o) => self.show_overlay(o),
                Command::ShowFirstError => self.show_first_error(),
                Command::ExportChart(shot) => self.export_chart(shot),
                Command::OpenDemoOverlay => self.start_chore("demo", |_| {
                    Chore::Demo(crate::sample::gptq::demo_overlay().map_err(|e| format!("{e:#}")))
                }),
                Command::PickSigningFile(kind) => self.start_dialog(match kind {
                    super::signing::TrustFile::Key => DialogKind::SigningKey,
                    super::signing::TrustFile::Root => DialogKind::CertRoot,
                }),
                Command::SetSigningFile(kind, file) => {
                    if let Some(s) = &self.session {
                        let p = s.path.clone();
                        self.signing.add(&p, kind, file);
                        self.open(p, false);
                    }
                }
                Command::ForgetSigningFiles => {
                    if let Some(s) = &self.session {
                        let p = s.path.clone();
                        self.signing.forget(&p);
                        self.open(p, false);
                    }
                }
                Command::PickParent => self.start_dialog(DialogKind::Parent),
                Command::SetParent(dir) => {
                    if let Some(s) = &self.session {
                        let p = s.path.clone();
                        self.lineage.parent = Some(dir);
                        self.open(p, false);
                        self.central = CentralTab::Lineage;
                    }
                }
                Command::PickCompare => {
                    if self
                        .session
                        .as_ref()
                        .is_some_and(|s| s.model.bundle.is_some())
                    {
                        self.start_dialog(DialogKind::Compare);
                    }
                }
                Command::Compare(b) => self.start_compare(b),
                Command::CancelCompare => self.compare.cancel(),
                Command::CloseCompare => {
                    self.compare.reset();
                    if self.central == CentralTab::Compare {
                        self.central = CentralTab::Tensors;
                    }
                }
                Command::SelectDiffRow(k) => self.compare.select(k, self.ctx.clone()),
                Command::SaveDiffReportDialog => {
                    if self.compare.result().is_some() {
                        self.start_dialog(DialogKind::SaveDiff);
                    }
                }
                Command::SaveDiffReport(path) => self.save_diff_report(path),
            }
        }
    }

    fn start_chore(
        &mut self,
        name: &'static str,
        work: impl FnOnce(&super::jobs::Worker<Chore>) -> Chore + Send + 'static,
    ) {
        match Job::once(name, self.ctx.clone(), work) {
            Ok(j) => self.opening.chores.push(j),
            Err(e) => self.set_notice(e, true),
        }
    }

    /// Checks the guard here (cheap path checks on a user-chosen file are
    /// not worth a job, but the write is); the JSON is written on a job.
    fn save_report(&mut self, path: PathBuf) {
        let Some(s) = &self.session else { return };
        let Some(report) = s.model.report(&s.path.display().to_string()) else {
            self.set_notice("nothing to save yet", true);
            return;
        };
        let bundle = s.path.clone();
        self.start_chore("save-report", move |_| {
            Chore::Saved(write_report(&bundle, &path, &report))
        });
    }

    /// Compares the open bundle with `b` on a job and shows the Compare tab.
    pub(super) fn start_compare(&mut self, b: PathBuf) {
        // A still opening: compare once its index is in.
        if self
            .session
            .as_ref()
            .is_some_and(|s| s.model.bundle.is_none() && s.running())
        {
            self.compare.queue(b);
            self.central = CentralTab::Compare;
            return;
        }
        let Some((a_path, a)) = self
            .session
            .as_ref()
            .and_then(|s| Some((s.path.clone(), s.model.bundle.clone()?)))
        else {
            self.set_notice("open a bundle first, then compare it with another", true);
            return;
        };
        match self.compare.start(a_path, a, b, self.ctx.clone()) {
            Ok(()) => self.central = CentralTab::Compare,
            Err(e) => self.set_notice(e, true),
        }
    }

    /// Writes the comparison (never into either bundle's folder), on a job.
    fn save_diff_report(&mut self, path: PathBuf) {
        let Some(r) = self.compare.result() else {
            return;
        };
        let report = r.report.clone();
        let (a, b) = (PathBuf::from(&report.a.path), PathBuf::from(&report.b.path));
        self.start_chore("save-diff", move |_| {
            Chore::Saved(if inside_bundle(&a, &path) || inside_bundle(&b, &path) {
                Err("bundlescope never writes into a bundle folder; choose another place".into())
            } else {
                super::compare::write_diff_report(&report, &path)
            })
        });
    }

    fn start_dialog(&mut self, kind: DialogKind) {
        if self.dialog.is_some() {
            return;
        }
        let job = Job::once("dialog", self.ctx.clone(), move |_| match kind {
            DialogKind::Open => rfd::FileDialog::new()
                .set_title("Open bundle folder")
                .pick_folder(),
            DialogKind::Save => rfd::FileDialog::new()
                .set_title("Save report (.json or .md)")
                .set_file_name("bundlescope-report.json")
                .add_filter("JSON report", &["json"])
                .add_filter("Markdown report", &["md"])
                .save_file(),
            DialogKind::SaveDiff => rfd::FileDialog::new()
                .set_title("Save comparison (.json or .md)")
                .set_file_name("bundlescope-diff.md")
                .add_filter("Markdown report", &["md"])
                .add_filter("JSON report", &["json"])
                .save_file(),
            DialogKind::Compare => rfd::FileDialog::new()
                .set_title("Compare with bundle folder")
                .pick_folder(),
            DialogKind::Reference => rfd::FileDialog::new()
                .set_title("Choose the reference checkpoint folder")
                .pick_folder(),
            DialogKind::Parent => rfd::FileDialog::new()
                .set_title("Choose the parent bundle folder")
                .pick_folder(),
            DialogKind::SigningKey => rfd::FileDialog::new()
                .set_title("Choose the signer's public key (PEM)")
                .add_filter("PEM public key", &["pem", "pub", "key"])
                .pick_file(),
            DialogKind::CertRoot => rfd::FileDialog::new()
                .set_title(
                    "Choose a trusted root: a certificate (PEM) or a Sigstore trusted_root.json",
                )
                .add_filter(
                    "PEM certificate or Sigstore trusted root",
                    &["pem", "crt", "cer", "json"],
                )
                .pick_file(),
        });
        match job {
            Ok(job) => self.dialog = Some(Dialog { kind, job }),
            Err(e) => self.set_notice(e, true),
        }
    }

    pub(super) fn poll_dialog(&mut self) {
        let Some(d) = &self.dialog else { return };
        let answer = match d.job.poll() {
            Poll::Empty => return,
            Poll::Msg(answer) => answer,
            Poll::Ended => None,
        };
        let kind = d.kind;
        self.dialog = None;
        match (kind, answer) {
            (DialogKind::Open, Some(p)) => self.send(Command::Open(p)),
            (DialogKind::Save, Some(p)) => self.send(Command::SaveReport(p)),
            (DialogKind::Reference, Some(p)) => self.send(Command::SetReference(p)),
            (DialogKind::Parent, Some(p)) => self.send(Command::SetParent(p)),
            (DialogKind::SigningKey, Some(p)) => {
                self.send(Command::SetSigningFile(super::signing::TrustFile::Key, p))
            }
            (DialogKind::CertRoot, Some(p)) => {
                self.send(Command::SetSigningFile(super::signing::TrustFile::Root, p))
            }
            (DialogKind::Compare, Some(p)) => self.send(Command::Compare(p)),
            (DialogKind::SaveDiff, Some(p)) => self.send(Command::SaveDiffReport(p)),
            (_, None) => {
                if cfg!(target_os = "linux") {
                    self.set_notice(
                        "No folder chosen. If no dialog appeared, no xdg-desktop-portal answered: drop the folder on the window, or run `bundlescope DIR`.",
                        false,
                    );
                }
            }
        }
    }

    pub(super) fn poll_chores(&mut self) {
        let mut done = Vec::new();
        self.opening.chores.retain(|j| match j.poll() {
            Poll::Msg(c) => {
                done.push(c);
                false
            }
            Poll::Empty => true,
            Poll::Ended => false,
        });
        for c in done {
            match c {
                Chore::Demo(Ok(p)) => self.open(p, true),
                Chore::Demo(Err(e)) => {
                    self.set_notice(format!("could not write the demo bundle: {e}"), true)
                }
                Chore::Saved(Ok(m)) => self.set_notice(m, false),
                Chore::Saved(Err(m)) => self.set_notice(m, true),
            }
        }
    }
}

/// Does the file name ask for Markdown (`.md`, `.markdown`)? Anything
/// else is written as JSON.
pub(super) fn is_markdown(out: &Path) -> bool {
    out.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("md") || e.eq_ignore_ascii_case("markdown"))
}

/// Is `out` inside the folder of the bundle at `bundle` (judged on real
/// paths: a bundle opened through its manifest or a symlink is caught)?
pub(super) fn inside_bundle(bundle: &Path, out: &Path) -> bool {
    use crate::util::paths::{bundle_folder, is_inside};
    match bundle_folder(bundle) {
        Some(folder) => is_inside(out, &folder),
        // The bundle is gone; a plain prefix check is all that is left.
        None => out.starts_with(bundle),
    }
}

/// Writes the report unless `out` lies inside the bundle's folder (judged on
/// real paths: a bundle opened through its manifest or a symlink is caught).
fn write_report(
    bundle: &Path,
    out: &Path,
    report: &crate::report::Report,
) -> Result<String, String> {
    if inside_bundle(bundle, out) {
        return Err("bundlescope never writes into the bundle folder; choose another place".into());
    }
    let bytes = if is_markdown(out) {
        crate::report::markdown::audit_markdown(report).into_bytes()
    } else {
        serde_json::to_vec_pretty(report)
            .map_err(|e| format!("could not encode the report: {e}"))?
    };
    std::fs::write(out, bytes).map_err(|e| format!("could not save {}: {e}", out.display()))?;
    Ok(format!("report saved to {}", out.display()))
}
