//! A memcached server under Facebook's ETC workload (Atikoglu et al., "Workload Analysis
//! of a Large-Scale Key-Value Store", SIGMETRICS '12, §5 model), as page accesses.
//!
//! Sizes follow the published ETC model: keys GEV(μ 30.7984, σ 8.20449, ξ 0.078688);
//! values take 0..=14 bytes with the measured probabilities (44.155 % in all) and
//! otherwise GP(θ 0, σ 214.476, ξ 0.348238) — the table mutilate's `fb_value` and YCSB's
//! `FacebookFieldLengthGenerator` carry. Gets outnumber sets 30:1.
//!
//! Memory follows memcached 1.6's slab allocator: items (48-byte header + 8-byte CAS +
//! key + NUL + value + CRLF) go into chunks of slab classes growing by 1.25 from 96 bytes,
//! carved from 1 MiB slab pages taken in the order classes need them; records are loaded
//! in id order. The hash table (8-byte bucket pointers, one bucket per 1.5 items rounded
//! up to a power of two, at least 2^16) comes first. A get reads its bucket's page and the
//! pages its item spans; a set reads the bucket and rewrites the item in place (same
//! size: memcached would take a fresh chunk of the same class).
//!
//! The paper runs ETC with 90 % of requests on 10 % of the keys, popular keys scattered
//! over memory (§6.2.1); that is [`EtcConfig::paper`]. Not modelled: LRU bumps on get,
//! evictions, items over 512 KiB (values are capped to fit the largest chunk).

use std::sync::Arc;
use znswap_core::PAGE_BYTES;

use crate::dist::{gev_quantile, gp_quantile, Rng};
use crate::kv::{bucket_of, push_span, KvConfigError, KvOp, KvStream, OpKind, Popularity, RecordChooser};
use crate::Access;

/// ETC key sizes: generalized extreme value.
pub const ETC_KEY_GEV: (f64, f64, f64) = (30.7984, 8.20449, 0.078688);
/// ETC value sizes past the small ones: generalized Pareto (θ, σ, ξ).
pub const ETC_VALUE_GP: (f64, f64, f64) = (0.0, 214.476, 0.348238);
/// P(value = n bytes) for n in 0..=14 (the measured spike of tiny values).
pub const ETC_SMALL_VALUE_PROBABILITIES: [f64; 15] = [
    0.00536, 0.00047, 0.17820, 0.09239, 0.00018, 0.02740, 0.00065, 0.00606, 0.00023, 0.00837, 0.00837, 0.08989,
    0.00092, 0.00326, 0.01980,
];

/// memcached's longest key.
pub const KEY_BYTES_MAX: u32 = 250;
/// `sizeof(item)` (48) + the 8-byte CAS.
pub const ITEM_HEADER_BYTES: u32 = 56;
/// Slab page (`-I`, 1 MiB) and the largest chunk (`slab_chunk_size_max`, half a page).
pub const SLAB_PAGE_BYTES: u64 = 1 << 20;
pub const SLAB_CHUNK_MAX_BYTES: u32 = 1 << 19;
/// Hash table: `hashpower` 16 at start, doubled while items exceed 1.5 per bucket.
const HASH_BUCKETS_MIN: u64 = 1 << 16;

/// Buckets for `records` items: at most 1.5 items a bucket, a power of two, ≥ 2^16.
fn hash_buckets(records: u64) -> u64 {
    records.div_ceil(3).saturating_mul(2).next_power_of_two().max(HASH_BUCKETS_MIN)
}

/// E[ceil(N / per_page)] for N ~ Poisson(mean): the slab pages of a class holding `mean`
/// items on average (its last page is partly empty; a rare class costs a whole page).
fn expected_slab_pages(mean: f64, per_page: u64) -> f64 {
    let per_page_f = per_page as f64;
    if mean > 200.0 {
        return mean / per_page_f + (per_page_f - 1.0) / (2.0 * per_page_f);
    }
    let (mut probability, mut expected) = ((-mean).exp(), 0.0);
    for items in 1..(mean as u64 + 200) {
        probability *= mean / items as f64;
        expected += probability * items.div_ceil(per_page) as f64;
    }
    expected
}

/// The item bytes of a record: header, key and its NUL, value and its CRLF.
pub fn item_bytes(key_bytes: u32, value_bytes: u32) -> u32 {
    ITEM_HEADER_BYTES + key_bytes + 1 + value_bytes + 2
}

/// The largest value that keeps an item within the largest chunk.
fn value_bytes_max(key_bytes: u32) -> u32 {
    SLAB_CHUNK_MAX_BYTES - item_bytes(key_bytes, 0)
}

/// memcached's slab class chunk sizes (`slabs_init` with `-f 1.25 -n 48`): 96, 120,
/// 152, …, 394840, then 524288.
pub fn slab_class_sizes() -> Vec<u32> {
    let mut sizes = Vec::new();
    let mut size = ITEM_HEADER_BYTES - 8 + 48; // sizeof(item) + chunk_size
    while (size as f64) < SLAB_CHUNK_MAX_BYTES as f64 / 1.25 {
        size = size.next_multiple_of(8);
        sizes.push(size);
        size = (size as f64 * 1.25) as u32;
    }
    sizes.push(SLAB_CHUNK_MAX_BYTES);
    sizes
}

/// Draws of the ETC size model.
pub(crate) fn draw_key_bytes(rng: &mut Rng) -> u32 {
    let (mu, sigma, xi) = ETC_KEY_GEV;
    // u in (0, 1): unit_open is (0, 1]; u = 1 would be +inf for ξ > 0.
    let u = rng.unit_open().min(1.0 - f64::EPSILON);
    gev_quantile(u, mu, sigma, xi).round().clamp(1.0, KEY_BYTES_MAX as f64) as u32
}

pub(crate) fn draw_value_bytes(rng: &mut Rng, key_bytes: u32) -> u32 {
    let mut u = rng.unit_open() - f64::EPSILON / 2.0; // [0, 1)
    for (bytes, &p) in ETC_SMALL_VALUE_PROBABILITIES.iter().enumerate() {
        if u < p {
            return bytes as u32;
        }
        u -= p;
    }
    let (theta, sigma, xi) = ETC_VALUE_GP;
    let tail = rng.unit_open() - f64::EPSILON / 2.0;
    let bytes = gp_quantile(tail.max(0.0), theta, sigma, xi).round();
    bytes.min(value_bytes_max(key_bytes) as f64) as u32
}

/// An ETC-like memcached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcConfig {
    pub records: u64,
    /// Gets per set (ETC: 30).
    pub gets_per_set: u32,
    pub popularity: Popularity,
    /// Spread the hot records over memory (true in the paper's run) or keep them in id
    /// (load) order.
    pub hot_scattered: bool,
    /// Seed of the sizes and of the scattering; each stream has its own seed for ops.
    pub seed: u64,
}

impl EtcConfig {
    /// The paper's run (§6.2.1): ETC sizes, 30 gets per set, 90 % of requests on 10 % of
    /// the keys, popular keys scattered over memory.
    pub fn paper(records: u64, seed: u64) -> EtcConfig {
        EtcConfig {
            records,
            gets_per_set: 30,
            popularity: Popularity::Hotspot { hot_percent: 10, hot_access_percent: 90 },
            hot_scattered: true,
            seed,
        }
    }

    /// ETC as published: keys uniform over the records.
    pub fn uniform(records: u64, seed: u64) -> EtcConfig {
        EtcConfig { popularity: Popularity::Uniform, ..EtcConfig::paper(records, seed) }
    }

    /// About how many records fill `pages` of memory. From a fixed sample of the size
    /// model it knows each slab class's share of items; `n` records then take, per class,
    /// the expected slab pages of a Poisson(n · share) count of items, plus the hash table.
    pub fn records_for_pages(pages: u64) -> u64 {
        const SAMPLE: u32 = 200_000;
        let classes = slab_class_sizes();
        let mut rng = Rng::new(0x5EED);
        let mut share = vec![0.0; classes.len()];
        for _ in 0..SAMPLE {
            let key = draw_key_bytes(&mut rng);
            let item = item_bytes(key, draw_value_bytes(&mut rng, key));
            share[classes.partition_point(|&size| size < item)] += 1.0 / SAMPLE as f64;
        }
        let bytes_for = |records: u64| -> f64 {
            let slab_pages: f64 = classes
                .iter()
                .zip(&share)
                .map(|(&chunk, &share)| expected_slab_pages(records as f64 * share, SLAB_PAGE_BYTES / chunk as u64))
                .sum();
            slab_pages * SLAB_PAGE_BYTES as f64 + (hash_buckets(records) * 8) as f64
        };
        let budget = (pages * PAGE_BYTES as u64) as f64;
        // The most records that fit: bisection (the byte count grows with the records).
        let (mut fits, mut too_many) = (0u64, pages * PAGE_BYTES as u64 / 64 + 2);
        while too_many - fits > 1 {
            let middle = fits + (too_many - fits) / 2;
            if bytes_for(middle) <= budget {
                fits = middle;
            } else {
                too_many = middle;
            }
        }
        fits.max(1)
    }

    pub fn validate(&self) -> Result<(), KvConfigError> {
        if self.records == 0 {
            return Err(KvConfigError::NoRecords);
        }
        if self.gets_per_set == 0 {
            return Err(KvConfigError::Zero { name: "gets_per_set" });
        }
        self.popularity.validate()
    }
}

/// Where every record lives: shared by the streams of all client threads.
#[derive(Clone, Debug)]
pub struct EtcLayout {
    config: EtcConfig,
    hash_buckets: u64,
    hash_pages: u64,
    pages: u64,
    /// Byte offset of each record's item in the arena, in 8-byte units (chunks are
    /// 8-byte aligned), and its item and key sizes.
    item_offset_8: Vec<u32>,
    item_bytes: Vec<u32>,
    key_bytes: Vec<u8>,
}

impl EtcLayout {
    pub fn new(config: &EtcConfig) -> Result<EtcLayout, KvConfigError> {
        config.validate()?;
        let records = config.records;
        let hash_buckets = hash_buckets(records);
        let hash_pages = (hash_buckets * 8).div_ceil(PAGE_BYTES as u64);
        let classes = slab_class_sizes();
        // Per class: base of its current slab page and chunks used in it.
        let mut current: Vec<Option<(u64, u64)>> = vec![None; classes.len()];
        let mut arena_end = hash_pages * PAGE_BYTES as u64;
        let mut rng = Rng::new(config.seed);
        let mut layout = EtcLayout {
            config: *config,
            hash_buckets,
            hash_pages,
            pages: 0,
            item_offset_8: Vec::with_capacity(records as usize),
            item_bytes: Vec::with_capacity(records as usize),
            key_bytes: Vec::with_capacity(records as usize),
        };
        let offset_max = u32::MAX as u64 * 8;
        for _ in 0..records {
            let key = draw_key_bytes(&mut rng);
            let value = draw_value_bytes(&mut rng, key);
            let item = item_bytes(key, value);
            let class = classes.partition_point(|&size| size < item);
            let chunk = classes[class] as u64;
            let chunks_per_page = SLAB_PAGE_BYTES / chunk;
            let (base, used) = match current[class] {
                Some((base, used)) if used < chunks_per_page => (base, used),
                _ => {
                    let base = arena_end;
                    arena_end += SLAB_PAGE_BYTES;
                    (base, 0)
                }
            };
            current[class] = Some((base, used + 1));
            let offset = base + used * chunk;
            if offset > offset_max {
                return Err(KvConfigError::TooLarge { records, bytes: arena_end, max: offset_max });
            }
            debug_assert!(offset.trailing_zeros() >= 3 && offset + item as u64 <= base + SLAB_PAGE_BYTES);
            layout.item_offset_8.push((offset / 8) as u32);
            layout.item_bytes.push(item);
            layout.key_bytes.push(key as u8);
        }
        layout.pages = arena_end.div_ceil(PAGE_BYTES as u64);
        Ok(layout)
    }

    pub fn config(&self) -> &EtcConfig {
        &self.config
    }

    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Pages of the hash table, at the start of the arena.
    pub fn hash_pages(&self) -> u64 {
        self.hash_pages
    }

    /// The record's item: first byte in the arena and length.
    pub fn item(&self, record: u64) -> (u64, u32) {
        (self.item_offset_8[record as usize] as u64 * 8, self.item_bytes[record as usize])
    }

    pub fn key_bytes(&self, record: u64) -> u32 {
        self.key_bytes[record as usize] as u32
    }

    pub fn value_bytes(&self, record: u64) -> u32 {
        self.item_bytes[record as usize] - item_bytes(self.key_bytes(record), 0)
    }
}

/// One client's ETC operations over a shared [`EtcLayout`].
pub struct EtcStream {
    layout: Arc<EtcLayout>,
    chooser: RecordChooser,
    rng: Rng,
}

impl EtcStream {
    pub fn new(layout: Arc<EtcLayout>, seed: u64) -> EtcStream {
        let config = layout.config;
        let scatter_key = config.hot_scattered.then_some(config.seed ^ 0x5CA7_7E12);
        let chooser = RecordChooser::new(config.popularity, config.records, scatter_key);
        EtcStream { layout, chooser, rng: Rng::new(seed) }
    }

    pub fn layout(&self) -> &EtcLayout {
        &self.layout
    }
}

impl KvStream for EtcStream {
    fn next_op(&mut self, out: &mut Vec<Access>) -> KvOp {
        out.clear();
        let set = self.rng.below(self.layout.config.gets_per_set as u64 + 1) == 0;
        let record = self.chooser.pick(&mut self.rng);
        let bucket = bucket_of(record, self.layout.hash_buckets);
        out.push(Access { page: bucket * 8 / PAGE_BYTES as u64, write: false });
        let (first, bytes) = self.layout.item(record);
        push_span(out, first, bytes as u64, set);
        let kind = if set { OpKind::Set } else { OpKind::Get };
        KvOp { kind, record, value_bytes: self.layout.value_bytes(record) }
    }

    fn pages(&self) -> u64 {
        self.layout.pages
    }

    fn records(&self) -> u64 {
        self.layout.config.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_classes_match_memcached() {
        let sizes = slab_class_sizes();
        assert_eq!(&sizes[..12], &[96, 120, 152, 192, 240, 304, 384, 480, 600, 752, 944, 1184]);
        assert_eq!(sizes[sizes.len() - 2], 394_840);
        assert_eq!(*sizes.last().unwrap(), 524_288);
        assert!(sizes.windows(2).all(|w| w[0] < w[1] && w[0] % 8 == 0));
    }

    #[test]
    fn key_sizes_follow_the_gev() {
        let mut rng = Rng::new(11);
        let mut keys: Vec<u32> = (0..200_000).map(|_| draw_key_bytes(&mut rng)).collect();
        let mean = keys.iter().map(|&k| k as f64).sum::<f64>() / keys.len() as f64;
        keys.sort_unstable();
        let median = keys[keys.len() / 2];
        // GEV mean μ + σ(Γ(1−ξ) − 1)/ξ = 36.22, median μ + σ((ln 2)^−ξ − 1)/ξ = 33.85.
        assert!((mean - 36.22).abs() < 0.15, "mean {mean}");
        assert!((33..=35).contains(&median), "median {median}");
        assert!(keys[0] >= 1 && *keys.last().unwrap() <= KEY_BYTES_MAX);
    }

    #[test]
    fn values_have_the_tiny_spike_and_the_pareto_tail() {
        let mut rng = Rng::new(12);
        let draws = 400_000;
        let values: Vec<u32> = (0..draws).map(|_| draw_value_bytes(&mut rng, 30)).collect();
        let tiny = values.iter().filter(|&&v| v <= 14).count() as f64 / draws as f64;
        // 44.155 % from the table, plus the GP's own mass below 14.5 bytes (~3.7 %).
        let gp_below = 1.0 - (1.0 + 0.348238 * 14.5 / 214.476f64).powf(-1.0 / 0.348238);
        let expected = 0.44155 + (1.0 - 0.44155) * gp_below;
        assert!((tiny - expected).abs() < 0.004, "tiny share {tiny}, expected {expected}");
        let twos = values.iter().filter(|&&v| v == 2).count() as f64 / draws as f64;
        assert!((twos - 0.1782).abs() < 0.004, "2-byte values {twos}");
        // Mean of everything: table mean + (1 − 0.44155) · GP mean (σ/(1−ξ) = 329.07).
        let table_mean: f64 = ETC_SMALL_VALUE_PROBABILITIES.iter().enumerate().map(|(n, p)| n as f64 * p).sum();
        let expected_mean = table_mean + (1.0 - 0.44155) * 329.07;
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / draws as f64;
        assert!((mean - expected_mean).abs() / expected_mean < 0.03, "mean {mean} vs {expected_mean}");
    }

    #[test]
    fn thirty_gets_per_set() {
        let layout = Arc::new(EtcLayout::new(&EtcConfig::paper(10_000, 1)).unwrap());
        let mut stream = EtcStream::new(layout, 2);
        let mut out = Vec::new();
        let (mut gets, mut sets) = (0u64, 0u64);
        for _ in 0..310_000 {
            match stream.next_op(&mut out).kind {
                OpKind::Get => gets += 1,
                OpKind::Set => sets += 1,
            }
        }
        let ratio = gets as f64 / sets as f64;
        assert!((ratio - 30.0).abs() < 1.0, "get:set {ratio}");
    }

    #[test]
    fn items_sit_in_their_slab_pages_without_overlap() {
        let layout = EtcLayout::new(&EtcConfig::paper(50_000, 3)).unwrap();
        let mut items: Vec<(u64, u32)> = (0..50_000).map(|r| layout.item(r)).collect();
        items.sort_unstable();
        for pair in items.windows(2) {
            assert!(pair[0].0 + pair[0].1 as u64 <= pair[1].0, "items overlap: {pair:?}");
        }
        let hash_end = layout.hash_pages() * PAGE_BYTES as u64;
        for &(first, bytes) in &items {
            assert!(first >= hash_end, "an item inside the hash table");
            let slab = (first - hash_end) / SLAB_PAGE_BYTES;
            let slab_end = hash_end + (slab + 1) * SLAB_PAGE_BYTES;
            assert!(first + bytes as u64 <= slab_end, "an item crosses its slab page");
            assert!((first + bytes as u64).div_ceil(PAGE_BYTES as u64) <= layout.pages());
        }
        // Value bytes come back from the stored sizes.
        assert_eq!(item_bytes(layout.key_bytes(7), layout.value_bytes(7)), layout.item(7).1);
    }

    #[test]
    fn gets_read_and_sets_write_the_item_pages() {
        let layout = Arc::new(EtcLayout::new(&EtcConfig::uniform(5_000, 4)).unwrap());
        let mut stream = EtcStream::new(layout.clone(), 9);
        let mut out = Vec::new();
        for _ in 0..5_000 {
            let op = stream.next_op(&mut out);
            assert!(out[0].page < layout.hash_pages() && !out[0].write, "first the bucket");
            let (first, bytes) = layout.item(op.record);
            let pages: Vec<u64> =
                (first / PAGE_BYTES as u64..=(first + bytes as u64 - 1) / PAGE_BYTES as u64).collect();
            assert_eq!(out[1..].iter().map(|a| a.page).collect::<Vec<_>>(), pages);
            assert!(out[1..].iter().all(|a| a.write == (op.kind == OpKind::Set)));
            assert_eq!(op.value_bytes, layout.value_bytes(op.record));
            assert!(out.iter().all(|a| a.page < stream.pages()));
        }
    }

    #[test]
    fn hot_keys_are_scattered_over_memory() {
        let config = EtcConfig::paper(100_000, 5);
        let layout = Arc::new(EtcLayout::new(&config).unwrap());
        let mut stream = EtcStream::new(layout.clone(), 6);
        let mut out = Vec::new();
        let mut per_record = vec![0u32; 100_000];
        for _ in 0..500_000 {
            per_record[stream.next_op(&mut out).record as usize] += 1;
        }
        // The 10 % most requested records take about 90 % of the requests ...
        let mut counts = per_record.clone();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top: u64 = counts[..10_000].iter().map(|&c| c as u64).sum();
        assert!((top as f64 / 500_000.0 - 0.90).abs() < 0.01, "top-10 % share {}", top as f64 / 500_000.0);
        // ... and they are not the first 10 % of the records loaded.
        let first_tenth: u64 = per_record[..10_000].iter().map(|&c| c as u64).sum();
        assert!((first_tenth as f64 / 500_000.0) < 0.2, "hot records bunched at the start");
    }

    #[test]
    fn records_for_pages_fills_about_that_much() {
        // Slab pages are 1 MiB and each of ~30 classes rounds up: small footprints err more.
        for pages in [50_000, 200_000] {
            let records = EtcConfig::records_for_pages(pages);
            let layout = EtcLayout::new(&EtcConfig::paper(records, 8)).unwrap();
            let error = layout.pages() as f64 / pages as f64 - 1.0;
            assert!(error.abs() < 0.03, "{records} records take {} pages, not {pages}", layout.pages());
        }
    }

    #[test]
    fn streams_are_deterministic_per_seed() {
        let layout = Arc::new(EtcLayout::new(&EtcConfig::paper(1_000, 1)).unwrap());
        let run = |seed| {
            let mut stream = EtcStream::new(layout.clone(), seed);
            let mut out = Vec::new();
            (0..1000).map(|_| (stream.next_op(&mut out), out.clone())).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        assert_eq!(EtcLayout::new(&EtcConfig::paper(0, 1)).err(), Some(KvConfigError::NoRecords));
    }
}
