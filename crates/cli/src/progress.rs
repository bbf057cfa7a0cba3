//! The one progress line of the `znswap` commands: a message on stderr with the time
//! elapsed, redrawn in place, drawn only while stderr is a terminal (indicatif hides it
//! otherwise) and never with `--json`; cleared when the work is done.

use std::borrow::Cow;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A progress line; with `enabled` false (a `--json` run) nothing is drawn.
    pub fn new(enabled: bool) -> Progress {
        let target = if enabled { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        let style = ProgressStyle::with_template("[{elapsed_precise}] {msg}").expect("a valid template");
        Progress { bar: ProgressBar::with_draw_target(None, target).with_style(style) }
    }

    /// Shows `message` now.
    pub fn set(&self, message: impl Into<Cow<'static, str>>) {
        self.bar.set_message(message);
    }

    /// Prints `line` on stderr above the progress line.
    pub fn say(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }

    /// Removes the line.
    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    /// The line never outlives the work (an error path included).
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
