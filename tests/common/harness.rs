//! The one GUI harness factory: every GUI test (state, NVFP4, spot checks,
//! snapshots) builds the real `App` here, in an egui_kittest `Harness` of
//! the right size, with its own audit cache, and waits for jobs through the
//! same helpers.

use std::path::Path;
use std::time::Duration;

use bundlescope::app::{App, AuditCache, Command};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

/// How a test wants its window.
#[derive(Debug, Clone)]
pub struct GuiOptions {
    /// Window size in points.
    pub size: [f32; 2],
    /// Give the app an audit cache (in a temporary folder).
    pub cache: bool,
    /// Render through wgpu (snapshots).
    pub wgpu: bool,
    /// Payload size up to which a cached verdict is re-verified in the
    /// background; 0 (the default here) keeps a cached open as it is, so
    /// tests of the cache see it without racing the re-verify.
    pub reverify_limit: u64,
}

impl Default for GuiOptions {
    fn default() -> Self {
        Self {
            size: [1280.0, 820.0],
            cache: true,
            wgpu: false,
            reverify_limit: 0,
        }
    }
}

/// The real app in a harness.
pub struct Gui {
    pub harness: Harness<'static, App>,
    _cache: Option<tempfile::TempDir>,
}

/// The default window: 1280×820 with a cache.
pub fn gui() -> Gui {
    Gui::new(GuiOptions::default())
}

impl Gui {
    /// A window as `o` says.
    pub fn new(o: GuiOptions) -> Self {
        let cache = o.cache.then(|| tempfile::tempdir().expect("tempdir"));
        let app = App::new(
            cache
                .as_ref()
                .map(|c| AuditCache::new(c.path().to_path_buf())),
        )
        .with_reverify_limit(o.reverify_limit);
        let mut b = Harness::builder().with_size(o.size);
        if o.wgpu {
            b = b.wgpu();
        }
        let harness = b.build_ui_state(|ui, app: &mut App| app.ui(ui), app);
        Self {
            harness,
            _cache: cache,
        }
    }

    /// A default window around `app` (one built and restored by the test,
    /// as `run` does after a restart); no cache.
    pub fn with_app(app: App) -> Self {
        let harness = Harness::builder()
            .with_size(GuiOptions::default().size)
            .build_ui_state(|ui, app: &mut App| app.ui(ui), app);
        Self {
            harness,
            _cache: None,
        }
    }

    pub fn app(&mut self) -> &mut App {
        self.harness.state_mut()
    }

    pub fn state(&self) -> &App {
        self.harness.state()
    }

    /// Queues a command (it runs at the end of the next frame).
    pub fn send(&mut self, c: Command) {
        self.app().send(c);
    }

    /// Opens `dir` and waits until its audit (or cached verdict) is in.
    pub fn open(&mut self, dir: &Path) {
        self.send(Command::Open(dir.to_path_buf()));
        self.harness.step();
        self.finish();
    }

    /// Picks a key or root for the open bundle's folder, as its button's
    /// file dialog does, and waits for the audit that follows.
    pub fn pick_signing_file(&mut self, kind: bundlescope::app::signing::TrustFile, file: &Path) {
        self.send(Command::SetSigningFile(kind, file.to_path_buf()));
        self.harness.step();
        self.finish();
    }

    /// Waits for the running audit and the writes after it (the cache
    /// entry, a report), then runs a few frames so the screen shows them.
    pub fn finish(&mut self) {
        assert!(
            self.app().wait_for_audit(Duration::from_secs(60)),
            "audit did not finish"
        );
        assert!(
            self.app().wait_for_writes(Duration::from_secs(30)),
            "writes did not finish"
        );
        assert!(
            self.app().wait_for_range_hashes(Duration::from_secs(60)),
            "range hashes did not finish"
        );
        self.harness.run_steps(3);
    }

    /// The badge's verdict.
    pub fn verdict(&self) -> String {
        self.state()
            .session()
            .map(|s| s.verdict_text())
            .unwrap_or_default()
    }

    /// Tensors in the open bundle.
    pub fn tensor_count(&self) -> usize {
        self.state()
            .session()
            .and_then(|s| s.model.bundle.as_ref())
            .map_or(0, |b| b.tensors.len())
    }

    /// The open bundle (panics when none is open).
    pub fn bundle(&self) -> &bundlescope::format::Bundle {
        self.state()
            .session()
            .and_then(|s| s.model.bundle.as_deref())
            .expect("a bundle is open")
    }

    /// Index of tensor `name` in the open bundle.
    pub fn index(&self, name: &str) -> usize {
        self.state()
            .session()
            .and_then(|s| s.model.bundle.as_ref())
            .and_then(|b| b.find(name))
            .unwrap_or_else(|| panic!("no tensor {name}"))
    }

    /// Selects tensor `name` through a command and checks it took.
    pub fn select(&mut self, name: &str) -> usize {
        let i = self.index(name);
        self.send(Command::Select(Some(i)));
        self.harness.run_steps(3);
        assert_eq!(self.state().selected(), Some(i));
        i
    }

    /// Is some node's label containing `text` on screen?
    pub fn shows(&self, text: &str) -> bool {
        self.harness
            .query_all_by_label_contains(text)
            .next()
            .is_some()
    }

    /// Waits for the spot check, then runs a few frames.
    pub fn wait_spot(&mut self) {
        assert!(
            self.app().wait_for_spot(Duration::from_secs(90)),
            "spot check did not finish"
        );
        self.harness.run_steps(3);
    }
}
