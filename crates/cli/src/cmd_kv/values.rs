//! The data set of `znswap kv`: key names, value lengths and value bytes, all derived
//! from (seed, key, version) so that nothing but one version number per key needs
//! storing, and every byte a server returns can be checked.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use znswap_workload::etc::{item_bytes, ETC_SMALL_VALUE_PROBABILITIES, ETC_VALUE_GP, SLAB_CHUNK_MAX_BYTES};
use znswap_workload::pattern::mix64 as mix;

/// The shortest value: 8 bytes of a value's stream tell its (key, version) apart from any
/// other with a chance of confusion of 2^-64. ETC's own sizes go down to 0 bytes, which
/// would verify nothing.
pub const VALUE_BYTES_MIN: u32 = 8;

/// How long values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueSize {
    /// Every value this many bytes.
    Fixed(u32),
    /// Facebook's ETC value sizes (the model in `znswap_workload::etc`), per key.
    Etc,
}

impl ValueSize {
    /// `etc`, or a size such as `1000` or `4K`.
    pub fn parse(text: &str) -> Result<ValueSize, String> {
        if text.eq_ignore_ascii_case("etc") {
            return Ok(ValueSize::Etc);
        }
        let bytes = znswap_zoned::parse_size(text)?;
        // Past 1 MiB memcached refuses the item (its -I default); redis would take it, but
        // the two servers should run the same data set.
        if !(VALUE_BYTES_MIN as u64..=1 << 20).contains(&bytes) {
            return Err(format!("a value of {bytes} bytes: use {VALUE_BYTES_MIN} bytes to 1M, or etc"));
        }
        Ok(ValueSize::Fixed(bytes as u32))
    }

    pub fn name(&self) -> String {
        match self {
            ValueSize::Fixed(bytes) => bytes.to_string(),
            ValueSize::Etc => "etc".into(),
        }
    }
}

/// The keys `0..keys` and their values under one seed.
#[derive(Clone, Copy, Debug)]
pub struct Keyspace {
    pub keys: u64,
    pub value_size: ValueSize,
    pub seed: u64,
}

impl Keyspace {
    /// As many keys as it takes for their values to add up to `data_bytes` (at least one).
    /// For ETC sizes that means drawing them in order: a few nanoseconds a key.
    pub fn for_data(data_bytes: u64, value_size: ValueSize, seed: u64) -> Keyspace {
        let mut space = Keyspace { keys: 0, value_size, seed };
        space.keys = match value_size {
            ValueSize::Fixed(bytes) => data_bytes.div_ceil(bytes as u64).max(1),
            ValueSize::Etc => {
                let (mut keys, mut total) = (0, 0);
                while total < data_bytes || keys == 0 {
                    total += space.value_len(keys) as u64;
                    keys += 1;
                }
                keys
            }
        };
        space
    }

    /// The total of all value lengths.
    pub fn data_bytes(&self) -> u64 {
        match self.value_size {
            ValueSize::Fixed(bytes) => self.keys * bytes as u64,
            ValueSize::Etc => (0..self.keys).map(|key| self.value_len(key) as u64).sum(),
        }
    }

    /// The key's name on the wire: short, ASCII, no spaces (memcached's text protocol).
    pub fn key_name(key: u64, out: &mut Vec<u8>) {
        use std::io::Write;
        out.clear();
        write!(out, "kv:{key}").expect("writing to a Vec");
    }

    /// The length of every version of the key's value: a function of (seed, key) alone,
    /// so a value of the wrong length is wrong whatever its version.
    pub fn value_len(&self, key: u64) -> usize {
        match self.value_size {
            ValueSize::Fixed(bytes) => bytes as usize,
            ValueSize::Etc => {
                let draw = mix(mix(self.seed ^ 0x5A5A_0E7C_0000_0000) ^ key);
                // Two uniforms in [0, 1) from the two halves of one draw (32 bits each is
                // plenty for a size).
                let unit = |bits: u64| (bits & 0xFFFF_FFFF) as f64 / (1u64 << 32) as f64;
                let (pick, tail) = (unit(draw), unit(draw >> 32));
                etc_value_bytes(pick, tail, Self::key_len(key)) as usize
            }
        }
    }

    fn key_len(key: u64) -> u32 {
        // "kv:" and the decimal digits.
        3 + key.checked_ilog10().unwrap_or(0) + 1
    }

    /// The bytes of the key's value at `version`: a Xoshiro256++ stream seeded by a hash
    /// of (seed, key, version), cut to the key's length.
    pub fn fill_value(&self, key: u64, version: u32, out: &mut Vec<u8>) {
        let len = self.value_len(key);
        out.clear();
        out.reserve(len + 8);
        let mut rng = self.stream(key, version);
        while out.len() < len {
            out.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        out.truncate(len);
    }

    /// Whether `value` is the key's value at `version`, without building a copy.
    pub fn is_value(&self, key: u64, version: u32, value: &[u8]) -> bool {
        if value.len() != self.value_len(key) {
            return false;
        }
        let mut rng = self.stream(key, version);
        value.chunks(8).all(|chunk| chunk == &rng.next_u64().to_le_bytes()[..chunk.len()])
    }

    fn stream(&self, key: u64, version: u32) -> Xoshiro256PlusPlus {
        Xoshiro256PlusPlus::seed_from_u64(mix(mix(self.seed ^ mix(key)) ^ version as u64))
    }

    /// What a wrong value is, for the report: another version of the key (stale, or one
    /// ahead), zeros, the wrong length, or unknown bytes.
    pub fn describe_wrong(&self, key: u64, expected: u32, value: &[u8]) -> String {
        let len = self.value_len(key);
        if value.len() != len {
            return format!("{} bytes instead of {len}", value.len());
        }
        if value.iter().all(|&b| b == 0) {
            return "all zero bytes".into();
        }
        // Versions near the expected one first: a lost update shows as the one before.
        let mut candidates =
            (expected.saturating_add(1)..=expected.saturating_add(2)).chain((1..expected).rev().take(1000));
        if let Some(version) = candidates.find(|&v| self.is_value(key, v, value)) {
            return format!("version {version} of the key");
        }
        let head: String = value.iter().take(16).map(|b| format!("{b:02x}")).collect();
        format!("bytes of no recent version of the key (starting {head})")
    }
}

/// An ETC value size from two uniforms in [0, 1): `pick` chooses among the measured tiny
/// sizes or the generalized Pareto tail, `tail` places it in that tail. Floored at
/// [`VALUE_BYTES_MIN`] and capped, as `znswap_workload::etc` caps, at what fits
/// memcached's largest slab chunk.
pub fn etc_value_bytes(pick: f64, tail: f64, key_bytes: u32) -> u32 {
    let mut rest = pick;
    for (bytes, &p) in ETC_SMALL_VALUE_PROBABILITIES.iter().enumerate() {
        if rest < p {
            return (bytes as u32).max(VALUE_BYTES_MIN);
        }
        rest -= p;
    }
    let (theta, sigma, xi) = ETC_VALUE_GP;
    let bytes = theta + sigma / xi * ((1.0 - tail).powf(-xi) - 1.0);
    let max = SLAB_CHUNK_MAX_BYTES - item_bytes(key_bytes, 0);
    (bytes.round().min(max as f64) as u32).max(VALUE_BYTES_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_a_function_of_key_and_version() {
        let space = Keyspace { keys: 100, value_size: ValueSize::Fixed(21), seed: 7 };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        space.fill_value(3, 1, &mut a);
        space.fill_value(3, 1, &mut b);
        assert_eq!(a.len(), 21);
        assert_eq!(a, b, "the same key and version give the same bytes");
        space.fill_value(3, 2, &mut b);
        assert_ne!(a, b, "another version differs");
        space.fill_value(4, 1, &mut b);
        assert_ne!(a, b, "another key differs");
        let other_seed = Keyspace { seed: 8, ..space };
        other_seed.fill_value(3, 1, &mut b);
        assert_ne!(a, b, "another seed differs");
        assert!(space.is_value(3, 1, &a));
        assert!(!space.is_value(3, 2, &a));
        assert!(!space.is_value(3, 1, &a[..20]));
        let mut flipped = a.clone();
        flipped[20] ^= 1;
        assert!(!space.is_value(3, 1, &flipped), "the last byte counts too");
    }

    #[test]
    fn wrong_values_are_described() {
        let space = Keyspace { keys: 10, value_size: ValueSize::Fixed(64), seed: 1 };
        let mut value = Vec::new();
        space.fill_value(5, 3, &mut value);
        assert_eq!(space.describe_wrong(5, 4, &value), "version 3 of the key");
        assert_eq!(space.describe_wrong(5, 2, &value), "version 3 of the key");
        assert_eq!(space.describe_wrong(5, 4, &[0; 64]), "all zero bytes");
        assert_eq!(space.describe_wrong(5, 4, &[0; 10]), "10 bytes instead of 64");
        space.fill_value(6, 3, &mut value);
        assert!(space.describe_wrong(5, 3, &value).starts_with("bytes of no recent version"));
    }

    #[test]
    fn etc_sizes_follow_the_model() {
        // The table of tiny sizes: 0 bytes (floored to 8), then 11 bytes at a cumulative
        // probability of 0.32768..0.41757; past 0.44155, the Pareto tail (median 168).
        assert_eq!(etc_value_bytes(0.0, 0.5, 5), VALUE_BYTES_MIN);
        assert_eq!(etc_value_bytes(0.35, 0.5, 5), 11);
        assert_eq!(etc_value_bytes(0.9, 0.5, 5), 168);
        assert_eq!(etc_value_bytes(0.9, 1.0 - 1e-12, 5), SLAB_CHUNK_MAX_BYTES - item_bytes(5, 0), "capped");

        let space = Keyspace { keys: 200_000, value_size: ValueSize::Etc, seed: 3 };
        let lens: Vec<usize> = (0..space.keys).map(|key| space.value_len(key)).collect();
        assert!(lens.iter().all(|&len| len >= VALUE_BYTES_MIN as usize && len < 1 << 19));
        // Up to 14 bytes: the table (44.155 %) and the tail's draws that round to 14 or less.
        let (sigma, xi) = (ETC_VALUE_GP.1, ETC_VALUE_GP.2);
        let tail_small = 1.0 - (1.0 + xi * 14.5 / sigma).powf(-1.0 / xi);
        let expected_tiny = 0.44155 + 0.55845 * tail_small;
        let tiny = lens.iter().filter(|&&len| len <= 14).count() as f64 / lens.len() as f64;
        assert!((tiny - expected_tiny).abs() < 0.005, "tiny share {tiny}, expected {expected_tiny}");
        // The mean: the table's sizes (floored at 8) and the tail's mean σ/(1−ξ) ≈ 329.
        let table_mean: f64 = ETC_SMALL_VALUE_PROBABILITIES.iter().enumerate().map(|(n, p)| n.max(8) as f64 * p).sum();
        let expected_mean = table_mean + 0.55845 * sigma / (1.0 - xi);
        let mean = lens.iter().sum::<usize>() as f64 / lens.len() as f64;
        assert!((mean - expected_mean).abs() / expected_mean < 0.05, "mean {mean}, expected {expected_mean}");
        // Different keys, different sizes; one key, one size.
        assert_eq!(space.value_len(12345), space.value_len(12345));
        assert!(lens[..100].iter().any(|&len| len != lens[0]));
    }

    #[test]
    fn keyspaces_hold_the_data_asked_for() {
        let fixed = Keyspace::for_data(1 << 20, ValueSize::Fixed(1000), 1);
        assert_eq!(fixed.keys, 1049);
        assert!(fixed.data_bytes() >= 1 << 20);
        let etc = Keyspace::for_data(1 << 20, ValueSize::Etc, 1);
        let bytes = etc.data_bytes();
        let last = etc.value_len(etc.keys - 1) as u64;
        assert!(bytes >= 1 << 20 && bytes - last < 1 << 20, "{bytes} bytes in {} keys", etc.keys);
        assert_eq!(Keyspace::for_data(0, ValueSize::Etc, 1).keys, 1);
        assert_eq!(Keyspace::key_len(0), 4);
        assert_eq!(Keyspace::key_len(12345), 8);
        let mut name = Vec::new();
        Keyspace::key_name(12345, &mut name);
        assert_eq!(name, b"kv:12345");
    }

    #[test]
    fn value_sizes_parse() {
        assert_eq!(ValueSize::parse("etc"), Ok(ValueSize::Etc));
        assert_eq!(ValueSize::parse("4K"), Ok(ValueSize::Fixed(4096)));
        assert!(ValueSize::parse("4").unwrap_err().contains("8 bytes to 1M"));
        assert!(ValueSize::parse("2M").is_err());
    }
}
