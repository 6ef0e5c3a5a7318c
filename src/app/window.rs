//! The window itself: its title names the bundle; what the user set up
//! (the last tab, the theme, the recent list) is saved with eframe's
//! storage and restored at start (eframe keeps the size and position
//! itself: `persist_window`); dates of cached audits in local time.

use std::path::{Path, PathBuf};

use egui::ThemePreference;
use serde::{Deserialize, Serialize};

use super::welcome::Recent;
use super::{App, CentralTab, SideTab};

/// Storage key of the recent list.
const RECENT_KEY: &str = "bundlescope.recent";
/// Storage key of the window's settings.
const PREFS_KEY: &str = "bundlescope.window";

/// What is remembered between runs besides the recent list.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Prefs {
    central: CentralTab,
    side: SideTab,
    theme: ThemePreference,
}

impl Default for Prefs {
    fn default() -> Self {
        Self {
            central: CentralTab::Tensors,
            side: SideTab::Summary,
            theme: ThemePreference::System,
        }
    }
}

/// The name a title bar shows for `path`: the folder's name (the folder of
/// a manifest opened directly).
pub(super) fn display_name(path: &Path) -> String {
    path.file_name()
        .filter(|n| *n != "manifest.json")
        .or_else(|| path.parent().and_then(Path::file_name))
        .map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
}

impl App {
    /// The window's title: the bundle's name, then the app's.
    pub fn title(&self) -> String {
        match &self.session {
            Some(s) => format!("{} — bundlescope", display_name(&s.path)),
            None => "bundlescope".into(),
        }
    }

    /// The theme chosen in View → Theme.
    pub fn theme(&self) -> ThemePreference {
        self.theme
    }

    /// The right-hand panel's tab.
    pub fn side(&self) -> SideTab {
        self.side
    }

    /// Once a frame: tells the window its title and theme when they change
    /// (not every frame: each is a call into the windowing system).
    pub(super) fn window_tick(&mut self, ctx: &egui::Context) {
        let title = self.title();
        if self.title_sent.as_deref() != Some(title.as_str()) {
            ctx.send_viewport_cmd(egui::ViewportCommand::Title(title.clone()));
            self.title_sent = Some(title);
        }
        if self.theme_applied != Some(self.theme) {
            ctx.set_theme(self.theme);
            self.theme_applied = Some(self.theme);
        }
    }

    /// Writes what is remembered between runs.
    pub fn save_to(&self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, RECENT_KEY, &self.recent.paths());
        let prefs = Prefs {
            central: self.central,
            side: self.side,
            theme: self.theme,
        };
        eframe::set_value(storage, PREFS_KEY, &prefs);
        self.signing.save_to(storage);
    }

    /// Reads what [`App::save_to`] wrote; missing or unreadable entries
    /// keep their defaults.
    pub fn restore(&mut self, storage: &dyn eframe::Storage) {
        let paths: Vec<PathBuf> = eframe::get_value(storage, RECENT_KEY).unwrap_or_default();
        self.recent = Recent::from_paths(paths, self.ctx.clone());
        let prefs: Prefs = eframe::get_value(storage, PREFS_KEY).unwrap_or_default();
        self.central = prefs.central;
        self.side = prefs.side;
        self.theme = prefs.theme;
        self.theme_applied = None;
        self.signing = super::signing::SigningTrust::restore(storage);
    }
}

/// A cached audit's date (`YYYY-MM-DD HH:MM UTC`, as the cache writes it)
/// in local time. Reading the local offset may read the time-zone files,
/// so this runs on the job that loads the cache, not in a frame.
pub fn local_date(utc: &str) -> String {
    match parse_utc(utc) {
        Some(t) => t
            .with_timezone(&chrono::Local)
            .format(LOCAL_FORMAT)
            .to_string(),
        None => utc.to_string(),
    }
}

/// [`local_date`] at a fixed offset (tests, and the reason it is right).
pub fn date_at(utc: &str, offset: chrono::FixedOffset) -> String {
    match parse_utc(utc) {
        Some(t) => t.with_timezone(&offset).format(LOCAL_FORMAT).to_string(),
        None => utc.to_string(),
    }
}

/// Local date and time with the offset, so the reader knows it is local.
const LOCAL_FORMAT: &str = "%Y-%m-%d %H:%M (UTC%:z)";

fn parse_utc(utc: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let naive = chrono::NaiveDateTime::parse_from_str(utc, "%Y-%m-%d %H:%M UTC").ok()?;
    Some(naive.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::cache::utc_text;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_cached_date_is_shown_at_the_local_offset() {
        // 2026-12-31 23:30 UTC, written by the cache's own formatter.
        let t = UNIX_EPOCH + Duration::from_secs(1_798_759_800);
        let utc = utc_text(t);
        assert_eq!(utc, "2026-12-31 23:30 UTC");
        let east = chrono::FixedOffset::east_opt(2 * 3600).unwrap();
        assert_eq!(date_at(&utc, east), "2027-01-01 01:30 (UTC+02:00)");
        let west = chrono::FixedOffset::west_opt(5 * 3600 + 30 * 60).unwrap();
        assert_eq!(date_at(&utc, west), "2026-12-31 18:00 (UTC-05:30)");
        let zero = chrono::FixedOffset::east_opt(0).unwrap();
        assert_eq!(date_at(&utc, zero), "2026-12-31 23:30 (UTC+00:00)");
    }

    #[test]
    fn an_unreadable_date_is_shown_as_it_is() {
        let east = chrono::FixedOffset::east_opt(3600).unwrap();
        assert_eq!(date_at("yesterday", east), "yesterday");
        assert_eq!(local_date("2026-13-40 99:99 UTC"), "2026-13-40 99:99 UTC");
    }

    #[test]
    fn the_title_names_the_folder_not_the_manifest() {
        assert_eq!(display_name(Path::new("/x/my-bundle")), "my-bundle");
        assert_eq!(
            display_name(Path::new("/x/my-bundle/manifest.json")),
            "my-bundle"
        );
    }
}
