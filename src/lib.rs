//! bundlescope: an inspector and auditor for quantized ML weight bundles.
//!
//! The engine is shared by the CLI and the desktop app: [`format`] turns a
//! folder into a [`format::Bundle`], [`audit`] streams the checks and hashes
//! as [`audit::Event`]s from a worker thread, [`report`] folds those events
//! into the one JSON report both faces export.

#[cfg(feature = "gui")]
pub mod app;
pub mod audit;
pub mod decode;
pub mod diff;
pub mod finding;
pub mod format;
pub mod mlx;
pub mod report;
pub mod sample;
pub mod signing;
pub mod spotcheck;
pub mod util;

/// The tool's name and version as they appear in reports.
pub const TOOL_NAME: &str = "bundlescope";
/// Crate version, stamped into every report.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");
