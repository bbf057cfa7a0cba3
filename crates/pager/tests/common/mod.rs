//! What the pager's integration tests share: page contents derived from (page, version),
//! and waits for a condition (never a sleep of a guessed length).

// Each test file uses what it needs of this module.
#![allow(dead_code)]

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

/// Fills a page with bytes derived from (page, version); version 0 means all zeroes.
pub fn fill(page_bytes: &mut [u8], page: u64, version: u64) {
    znswap_workload::pattern::fill(page_bytes, page, version);
}

/// Whether a page holds (page, version)'s content.
pub fn holds(page_bytes: &[u8], page: u64, version: u64) -> bool {
    znswap_workload::pattern::holds(page_bytes, page, version)
}

pub fn check(page_bytes: &[u8], page: u64, version: u64) {
    assert!(holds(page_bytes, page, version), "page {page} does not hold version {version}");
}

/// Writes every page of `memory` (one page in eight left all-zero: it must come back as
/// zeroes, unwritten), then makes `ops` accesses at pages picked at random with `seed`, a
/// third of them writes, checking every read against the versions written; then checks
/// every page once more.
pub fn exercise_memory(memory: &mut [u8], ops: u64, seed: u64) {
    use rand_core::{RngCore, SeedableRng};
    let page_bytes = znswap_pager::PAGE_BYTES;
    let pages = (memory.len() / page_bytes) as u64;
    let mut versions = vec![0u64; pages as usize];
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    for page in 0..pages {
        let version = if page % 8 == 7 { 0 } else { 1 };
        fill(&mut memory[page as usize * page_bytes..][..page_bytes], page, version);
        versions[page as usize] = version;
    }
    for _ in 0..ops {
        let page = rng.next_u64() % pages;
        let bytes = &mut memory[page as usize * page_bytes..][..page_bytes];
        if rng.next_u64() % 3 == 0 {
            versions[page as usize] += 1;
            fill(bytes, page, versions[page as usize]);
        } else {
            check(bytes, page, versions[page as usize]);
        }
    }
    for page in 0..pages {
        check(&memory[page as usize * page_bytes..][..page_bytes], page, versions[page as usize]);
    }
}
