//! What the tools and tests write and check: a page's content from (page, version), so a
//! page read back from the wrong place, the wrong time or as zeros is caught, and the
//! 64-bit mixer behind it (and behind keys, values and hash buckets elsewhere).

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

/// splitmix64's golden gamma, which `SplitMix64` adds to its state before it mixes.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's finaliser: a bijection of `u64` whose output bits each depend on every
/// input bit, so neighbouring inputs give unrelated outputs. (`rand_xoshiro`'s
/// `SplitMix64` returns exactly this of its state plus the gamma.)
pub fn mix64(x: u64) -> u64 {
    SplitMix64::seed_from_u64(x.wrapping_sub(GAMMA)).next_u64()
}

/// The 64-bit seed of a page's content at a version: seeds of different (page,
/// version) pairs differ but by chance (2^-64).
fn seed(page: u64, version: u64) -> u64 {
    mix64(page.wrapping_mul(GAMMA) ^ version.wrapping_add(0xD1B5_4A32_D192_ED03))
}

/// Word `index` of a page's content. Distinct indexes give distinct words, so a page is
/// never all zero (a pager keeps an all-zero page as a zero entry, which is right, but a
/// bench means to measure swap traffic), and no word depends on another, so filling and
/// checking vectorize (the xorshift chain this replaced cost about 1 µs a page, a third
/// of a sequential swap-out's time).
fn word(seed: u64, index: usize) -> u64 {
    seed ^ (index as u64).wrapping_mul(0x1_0000_0001)
}

/// Fills `bytes` (a multiple of 8 long: a page, or a larger block) with the content of
/// `page` at `version`; version 0 is all zeroes.
pub fn fill(bytes: &mut [u8], page: u64, version: u64) {
    assert!(bytes.len() % 8 == 0, "content comes in 8-byte words");
    if version == 0 {
        bytes.fill(0);
        return;
    }
    let seed = seed(page, version);
    for (index, chunk) in bytes.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(seed, index).to_le_bytes());
    }
}

/// Whether `bytes` hold `page`'s content at `version`.
pub fn holds(bytes: &[u8], page: u64, version: u64) -> bool {
    first_wrong_byte(bytes, page, version).is_none()
}

/// The first byte of `bytes` that is not `page`'s content at `version`, if any.
pub fn first_wrong_byte(bytes: &[u8], page: u64, version: u64) -> Option<usize> {
    assert!(bytes.len() % 8 == 0, "content comes in 8-byte words");
    let seed = seed(page, version);
    let expected = |index: usize| if version == 0 { 0 } else { word(seed, index) };
    // The common case, no difference, checked without branching per word.
    let diff = bytes.chunks_exact(8).enumerate().fold(0u64, |acc, (index, chunk)| {
        acc | (u64::from_le_bytes(chunk.try_into().expect("8 bytes")) ^ expected(index))
    });
    if diff == 0 {
        return None;
    }
    bytes.chunks_exact(8).enumerate().find_map(|(index, chunk)| {
        let expected = expected(index).to_le_bytes();
        chunk.iter().zip(expected).position(|(byte, expected)| *byte != expected).map(|at| index * 8 + at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// splitmix64's finaliser written out, to pin `mix64` to it.
    fn finaliser(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn mix64_is_splitmix64s_finaliser() {
        for x in [0, 1, 2, GAMMA, u64::MAX, 0x1234_5678_9ABC_DEF0] {
            assert_eq!(mix64(x), finaliser(x), "{x:#x}");
        }
    }

    #[test]
    fn contents_tell_pages_and_versions_apart_and_catch_any_flipped_byte() {
        let mut page = vec![0u8; 4096];
        fill(&mut page, 7, 3);
        assert!(holds(&page, 7, 3));
        assert!(!holds(&page, 8, 3) && !holds(&page, 7, 4) && !holds(&page, 7, 0));
        assert!(page.chunks_exact(8).all(|word| word != [0; 8]), "no zero word");
        for at in [0, 1, 2047, 4095] {
            page[at] ^= 0x10;
            assert_eq!(first_wrong_byte(&page, 7, 3), Some(at));
            page[at] ^= 0x10;
        }
        fill(&mut page, 7, 0);
        assert!(page.iter().all(|&byte| byte == 0) && holds(&page, 7, 0));
        // Seeds of neighbouring pages and versions differ (the content's only input).
        let mut seeds: Vec<u64> = (0..64).flat_map(|p| (1..64).map(move |v| seed(p, v))).collect();
        let count = seeds.len();
        seeds.sort_unstable();
        seeds.dedup();
        assert_eq!(seeds.len(), count);
    }
}
