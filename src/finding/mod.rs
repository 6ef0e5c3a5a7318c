//! Findings are data: the GUI filters them and the report serialises them.
//! The bottom of the house: `format/`, `audit/`, `spotcheck/` and both faces
//! use it, and it imports nothing of theirs.

pub mod checks;

use serde::{Deserialize, Serialize};

pub use checks::CheckId;

/// How bad a finding is. Any `Error` makes the verdict `invalid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Informational: nothing is wrong, but the user should know.
    Info,
    /// Suspicious but not a rule violation.
    Warning,
    /// A rule of the format is broken.
    Error,
}

impl Severity {
    /// Lower-case name as used in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One result of one check that did not pass (or that wants to be seen).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// Stable check id, e.g. `packed.reserved_code` (see [`checks`]).
    pub check: CheckId,
    /// What a person reads: what was expected and what was found.
    pub message: String,
    /// The tensor it concerns, if any.
    pub tensor: Option<String>,
    /// The manifest field (or file) it concerns, if any.
    pub field: Option<String>,
    /// Absolute byte offset in the payload (or shard) where it applies.
    pub offset: Option<u64>,
}

impl Finding {
    /// An error of check `check`.
    pub fn error(check: CheckId, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, check, message)
    }

    /// A warning of check `check`.
    pub fn warning(check: CheckId, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, check, message)
    }

    /// An informational finding of check `check`.
    pub fn info(check: CheckId, message: impl Into<String>) -> Self {
        Self::new(Severity::Info, check, message)
    }

    fn new(severity: Severity, check: CheckId, message: impl Into<String>) -> Self {
        Self {
            severity,
            check,
            message: message.into(),
            tensor: None,
            field: None,
            offset: None,
        }
    }

    /// Names the tensor the finding concerns.
    pub fn tensor(mut self, name: impl Into<String>) -> Self {
        self.tensor = Some(name.into());
        self
    }

    /// Names the field (or file) the finding concerns.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Sets the absolute byte offset.
    pub fn offset(mut self, offset: u64) -> Self {
        self.offset = Some(offset);
        self
    }

    /// Sets the byte offset when one is known.
    pub fn maybe_offset(mut self, offset: Option<u64>) -> Self {
        self.offset = offset;
        self
    }
}
