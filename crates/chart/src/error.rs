//! The crate's error type: renderers never panic on odd data, but they do refuse sizes that
//! cannot hold a chart and report I/O or encoder failures.

use std::fmt;

/// Why a chart could not be rendered or written.
#[derive(Debug)]
pub enum ChartError {
    /// The requested image size is zero, too large, or too small for the chart's frame.
    BadSize { width: u32, height: u32, reason: String },
    /// The PNG encoder failed (should not happen for in-memory output).
    Encode(String),
    /// Writing the PNG file failed.
    Io { path: String, source: std::io::Error },
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, ChartError>;

impl ChartError {
    pub(crate) fn bad_size(width: u32, height: u32, reason: impl Into<String>) -> ChartError {
        ChartError::BadSize { width, height, reason: reason.into() }
    }
}

impl fmt::Display for ChartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChartError::BadSize { width, height, reason } => {
                write!(f, "bad chart size {width}x{height}: {reason}")
            }
            ChartError::Encode(msg) => write!(f, "PNG encoding failed: {msg}"),
            ChartError::Io { path, source } => write!(f, "cannot write {path}: {source}"),
        }
    }
}

impl std::error::Error for ChartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ChartError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
