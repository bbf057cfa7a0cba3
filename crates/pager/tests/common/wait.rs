//! Waits for a condition, never a sleep of a guessed length: the pager's and the
//! command's integration tests share this file (the command's includes it by path).

use std::time::{Duration, Instant};

/// Whether `condition` holds within `within`, polled (every millisecond at first, then
/// less often, up to every 20 ms), checked once more at the deadline. For what may not
/// come (a try that is retried); what must come is [`wait_until`].
pub fn holds_within(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    let mut pause = Duration::from_millis(1);
    loop {
        if condition() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Waits until `condition` holds; panics naming `what` it waited for, and how long, if
/// it does not within `within` (a deadline far beyond the time it takes: a loaded
/// machine is slow, a broken pager never gets there).
#[track_caller]
pub fn wait_until(within: Duration, what: &str, condition: impl FnMut() -> bool) {
    assert!(holds_within(within, condition), "waited {within:?} for {what}, in vain");
}

/// Waits until `found` finds something, and returns it; panics as [`wait_until`] does.
#[track_caller]
pub fn wait_for<T>(within: Duration, what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let mut value = None;
    wait_until(within, what, || {
        value = found();
        value.is_some()
    });
    value.expect("found")
}
