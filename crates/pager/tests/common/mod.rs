//! What the pager's integration tests share: page contents derived from (page, version).

// Each test file uses what it needs of this module.
#![allow(dead_code)]

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
