//! What the pager's integration tests share: page contents derived from (page, version).

// Each test file uses what it needs of this module.
#![allow(dead_code)]

use znswap_pager::PAGE_BYTES;

/// Fills a page with bytes derived from (page, version); version 0 means all zeroes.
pub fn fill(page_bytes: &mut [u8], page: u64, version: u64) {
    if version == 0 {
        page_bytes.fill(0);
        return;
    }
    let mut state = (page << 20 ^ version).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in page_bytes.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}

/// Whether a page holds (page, version)'s content.
pub fn holds(page_bytes: &[u8], page: u64, version: u64) -> bool {
    let mut expected = vec![0u8; PAGE_BYTES];
    fill(&mut expected, page, version);
    page_bytes == expected.as_slice()
}

pub fn check(page_bytes: &[u8], page: u64, version: u64) {
    assert!(holds(page_bytes, page, version), "page {page} does not hold version {version}");
}
