//! How a run fails: a one-line message, details, and the run folder with the logs.

use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Something the run needs is missing or unusable; nothing was started.
    Setup,
    /// The run went wrong, or a check failed.
    Failed,
    /// SIGINT or SIGTERM arrived; the run was stopped.
    Interrupted,
}

/// A failed run: a one-line `message`, indented `details` (log excerpts, offending lines).
#[derive(Debug, Clone)]
pub struct LabError {
    pub kind: ErrorKind,
    pub message: String,
    pub details: String,
    pub run_dir: Option<PathBuf>,
}

impl LabError {
    pub(crate) fn interrupted_before_start() -> LabError {
        LabError {
            kind: ErrorKind::Interrupted,
            message: "interrupted before the run started".into(),
            details: String::new(),
            run_dir: None,
        }
    }

    pub(crate) fn setup(message: String) -> LabError {
        LabError {
            kind: ErrorKind::Setup,
            message,
            details: String::new(),
            run_dir: None,
        }
    }

    pub(crate) fn failed(message: String, details: String, run_dir: &Path) -> LabError {
        LabError {
            kind: ErrorKind::Failed,
            message,
            details,
            run_dir: Some(run_dir.into()),
        }
    }

    pub fn is_interrupted(&self) -> bool {
        self.kind == ErrorKind::Interrupted
    }

    pub fn console_log(&self) -> Option<PathBuf> {
        self.run_dir.as_ref().map(|d| d.join("console.log"))
    }

    /// The first line of the error, with the console log path (or, when the guest never
    /// started, the run folder).
    pub fn headline(&self) -> String {
        match (self.console_log(), &self.run_dir) {
            (Some(c), _) if c.exists() => {
                format!("{} (console log: {})", self.message, c.display())
            }
            (_, Some(d)) => format!("{} (run folder: {})", self.message, d.display()),
            _ => self.message.clone(),
        }
    }
}

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.headline())?;
        if !self.details.is_empty() {
            write!(f, "\n{}", self.details.trim_end())?;
        }
        Ok(())
    }
}

impl std::error::Error for LabError {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn error_headline_names_the_console_log_or_the_run_folder() {
        let dir = std::env::temp_dir().join(format!("qpip-lab-headline-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let e = LabError::failed("qpipd 0 exited".into(), "  x\n".into(), &dir);
        let d = dir.display();
        assert_eq!(e.headline(), format!("qpipd 0 exited (run folder: {d})"));
        fs::write(dir.join("console.log"), "").unwrap();
        assert_eq!(
            e.headline(),
            format!("qpipd 0 exited (console log: {d}/console.log)")
        );
        assert_eq!(
            e.to_string(),
            format!("qpipd 0 exited (console log: {d}/console.log)\n  x")
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
