//! The error type of `capsule-bundle`: every failure carries a one-line message naming
//! the file, the line and column or the step, and the cause.

use std::path::{Path, PathBuf};

/// An error from reading a spec, materializing a capsule or handling its bundle.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec is malformed at a known position.
    #[error("{}:{line}:{column}: {msg}", file.display())]
    Spec {
        file: PathBuf,
        line: u64,
        column: u64,
        msg: String,
    },
    /// The spec is wrong in a way that has no single position (e.g. a missing key).
    #[error("{}: {msg}", file.display())]
    SpecFile { file: PathBuf, msg: String },
    /// A materialization step (`source.steps[index]`) is wrong or failed.
    #[error("{}{}: source.steps[{index}] ({action}): {msg}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Step {
        file: PathBuf,
        line: Option<u64>,
        index: usize,
        action: String,
        msg: String,
    },
    /// A filesystem operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// No open capsule matches the reference.
    #[error("no open capsule named or at {0:?} (`capsule list` shows the open ones)")]
    NotFound(String),
    /// Anything else, already phrased as one line.
    #[error("{0}")]
    Other(String),
}

impl Error {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }
    pub fn other(msg: impl Into<String>) -> Self {
        Error::Other(msg.into())
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attach a path to an `io::Result`.
pub(crate) trait IoContext<T> {
    fn at(self, path: impl AsRef<Path>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
