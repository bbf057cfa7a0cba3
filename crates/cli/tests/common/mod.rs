//! What the `znswap` command's integration tests share: waits for a condition (a server
//! up, a line in a log, a process in a state), never a sleep of a guessed length.

// Each test file uses what it needs of this module.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Whether `condition` holds within `within`, polled (every millisecond at first, then
/// less often, up to every 20 ms), checked once more at the deadline. For what may not
/// come (a try that is retried, or a failure that says more than [`wait_until`] can);
/// what must come is [`wait_until`].
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
/// machine is slow, a broken program never gets there). `condition` may itself panic
/// to fail sooner (the process it waits on has ended, say).
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

/// The children of process `pid` (those its main thread started), as the kernel lists
/// them; none if it is gone.
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|pids| pids.split_whitespace().filter_map(|pid| pid.parse().ok()).collect())
        .unwrap_or_default()
}

/// The state letter of process `pid` (`/proc/PID/stat`: R, S, T stopped, Z, ...); None
/// if it is gone.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses, which may hold spaces and parentheses.
    stat[stat.rfind(')')? + 1..].split_whitespace().next()?.chars().next()
}

/// The command name of process `pid` (`/proc/PID/comm`); None if it is gone.
pub fn command_name(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|name| name.trim_end().to_string())
}
