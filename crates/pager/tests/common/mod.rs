//! What the pager's integration tests share: page contents derived from (page, version),
//! and waits for a condition (never a sleep of a guessed length).

// Each test file uses what it needs of this module.
#![allow(dead_code)]

mod wait;
#[allow(unused_imports)]
pub use wait::{holds_within, wait_for, wait_until};

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
