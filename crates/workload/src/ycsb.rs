//! A redis server under YCSB workload A (Cooper et al., SoCC '10), as page accesses:
//! 50 % reads, 50 % updates, records of 10 fields × 100 bytes, and — as in the paper's
//! run (§6.2.2) — a 20/80 hotspot: 80 % of operations on the hot 20 % of the keys.
//!
//! Memory follows redis on jemalloc, simplified: the main dict's bucket array (8-byte
//! pointers, as many buckets as records rounded up to a power of two: redis grows at load
//! factor 1), then one 64-byte block per record for its `dictEntry` and key, then the
//! values, each rounded up to a jemalloc size class (1000 + 24 bytes of object header →
//! 1024: four values per page). Records are laid out in load (key number) order, so the
//! hot set — YCSB's lowest key numbers — is one contiguous fifth of the values.
//!
//! A read looks up the bucket, the entry and reads every field (`readallfields`); an
//! update looks up the same way and writes one field (`writeallfields` is false).

use znswap_core::PAGE_BYTES;

use crate::dist::Rng;
use crate::kv::{bucket_of, push_span, KvConfigError, KvOp, KvStream, OpKind, Popularity, RecordChooser};
use crate::Access;

/// Bytes per record for its `dictEntry` (24) and key sds (~26), in jemalloc classes.
pub const ENTRY_BYTES: u64 = 64;
/// `robj` and encoding overhead in front of a value.
pub const VALUE_HEADER_BYTES: u64 = 24;

/// The jemalloc size class holding `bytes`: four classes per doubling past 64 bytes
/// (…, 640, 768, 896, 1024, 1280, …), multiples of 16 below.
pub fn jemalloc_size_class(bytes: u64) -> u64 {
    assert!(bytes > 0, "an allocation of 0 bytes");
    if bytes <= 8 {
        return 8;
    }
    if bytes <= 64 {
        return bytes.next_multiple_of(16);
    }
    let power = 1u64 << (63 - (bytes - 1).leading_zeros()); // largest power of two below bytes
    bytes.next_multiple_of(power / 4)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YcsbConfig {
    pub records: u64,
    pub field_count: u32,
    pub field_bytes: u32,
    /// Reads among operations (workload A: 50).
    pub read_percent: u8,
    pub popularity: Popularity,
}

impl YcsbConfig {
    /// Workload A with the paper's hotspot: 50/50 read/update, 80 % of operations on
    /// 20 % of the records, 10 fields of 100 bytes.
    pub fn workload_a(records: u64) -> YcsbConfig {
        YcsbConfig {
            records,
            field_count: 10,
            field_bytes: 100,
            read_percent: 50,
            popularity: Popularity::Hotspot { hot_percent: 20, hot_access_percent: 80 },
        }
    }

    /// A read-mostly skewed mix: 90 % reads, 10 % updates, 80 % of operations on 20 % of
    /// the records, values of 4 KiB (one field).
    pub fn read_mostly(records: u64) -> YcsbConfig {
        YcsbConfig {
            records,
            field_count: 1,
            field_bytes: 4096,
            read_percent: 90,
            popularity: Popularity::Hotspot { hot_percent: 20, hot_access_percent: 80 },
        }
    }

    pub fn validate(&self) -> Result<(), KvConfigError> {
        if self.records == 0 {
            return Err(KvConfigError::NoRecords);
        }
        if self.field_count == 0 {
            return Err(KvConfigError::Zero { name: "field_count" });
        }
        if self.field_bytes == 0 {
            return Err(KvConfigError::Zero { name: "field_bytes" });
        }
        if self.read_percent > 100 {
            return Err(KvConfigError::PercentOutOfRange { name: "read_percent", value: self.read_percent as u32 });
        }
        self.popularity.validate()
    }

    pub fn value_bytes(&self) -> u64 {
        self.field_count as u64 * self.field_bytes as u64
    }

    /// Bytes between the starts of consecutive values.
    pub fn value_stride_bytes(&self) -> u64 {
        jemalloc_size_class(VALUE_HEADER_BYTES + self.value_bytes())
    }

    fn buckets(&self) -> u64 {
        self.records.next_power_of_two()
    }

    /// The records whose layout takes about `pages` pages.
    pub fn records_for_pages(pages: u64, config: YcsbConfig) -> u64 {
        // Buckets: between 8 and 16 bytes a record; take 12.
        let per_record = config.value_stride_bytes() + ENTRY_BYTES + 12;
        (pages * PAGE_BYTES as u64 / per_record).max(1)
    }
}

/// The arena's regions, in pages from 0: buckets, entries, values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YcsbLayout {
    pub bucket_pages: u64,
    pub entry_pages: u64,
    pub value_pages: u64,
}

/// One client's YCSB operations. The layout is arithmetic, so each stream carries it.
pub struct YcsbStream {
    config: YcsbConfig,
    layout: YcsbLayout,
    chooser: RecordChooser,
    rng: Rng,
}

impl YcsbStream {
    pub fn new(config: YcsbConfig, seed: u64) -> Result<YcsbStream, KvConfigError> {
        config.validate()?;
        let records = config.records;
        let layout = YcsbLayout {
            bucket_pages: (config.buckets() * 8).div_ceil(PAGE_BYTES as u64),
            entry_pages: (records * ENTRY_BYTES).div_ceil(PAGE_BYTES as u64),
            value_pages: (records * config.value_stride_bytes()).div_ceil(PAGE_BYTES as u64),
        };
        let chooser = RecordChooser::new(config.popularity, records, None);
        Ok(YcsbStream { config, layout, chooser, rng: Rng::new(seed) })
    }

    pub fn layout(&self) -> YcsbLayout {
        self.layout
    }

    /// The first byte of the record's value in the arena.
    pub fn value_offset(&self, record: u64) -> u64 {
        (self.layout.bucket_pages + self.layout.entry_pages) * PAGE_BYTES as u64
            + record * self.config.value_stride_bytes()
    }
}

impl KvStream for YcsbStream {
    fn next_op(&mut self, out: &mut Vec<Access>) -> KvOp {
        out.clear();
        let read = self.rng.percent(self.config.read_percent);
        let record = self.chooser.pick(&mut self.rng);
        let bucket = bucket_of(record, self.config.buckets());
        out.push(Access { page: bucket * 8 / PAGE_BYTES as u64, write: false });
        let entry = self.layout.bucket_pages * PAGE_BYTES as u64 + record * ENTRY_BYTES;
        push_span(out, entry, ENTRY_BYTES, false);
        let value = self.value_offset(record);
        if read {
            push_span(out, value, VALUE_HEADER_BYTES + self.config.value_bytes(), false);
            KvOp { kind: OpKind::Get, record, value_bytes: self.config.value_bytes() as u32 }
        } else {
            let field = self.rng.below(self.config.field_count as u64);
            let field_bytes = self.config.field_bytes as u64;
            push_span(out, value + VALUE_HEADER_BYTES + field * field_bytes, field_bytes, true);
            KvOp { kind: OpKind::Set, record, value_bytes: field_bytes as u32 }
        }
    }

    fn pages(&self) -> u64 {
        self.layout.bucket_pages + self.layout.entry_pages + self.layout.value_pages
    }

    fn records(&self) -> u64 {
        self.config.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_are_jemallocs() {
        assert_eq!(jemalloc_size_class(1024), 1024);
        assert_eq!(jemalloc_size_class(1025), 1280);
        assert_eq!(jemalloc_size_class(700), 768);
        assert_eq!(jemalloc_size_class(40), 48);
        assert_eq!(YcsbConfig::workload_a(10).value_stride_bytes(), 1024, "four 1 KiB values a page");
    }

    fn run(config: YcsbConfig, ops: usize) -> (YcsbStream, Vec<(KvOp, Vec<Access>)>) {
        let mut stream = YcsbStream::new(config, 21).unwrap();
        let mut out = Vec::new();
        let ops = (0..ops).map(|_| (stream.next_op(&mut out), out.clone())).collect();
        (stream, ops)
    }

    #[test]
    fn workload_a_is_half_reads_with_80_percent_on_the_hot_fifth() {
        let records = 100_000;
        let (stream, ops) = run(YcsbConfig::workload_a(records), 400_000);
        let reads = ops.iter().filter(|(op, _)| op.kind == OpKind::Get).count() as f64 / ops.len() as f64;
        assert!((reads - 0.5).abs() < 0.005, "reads {reads}");
        let hot = ops.iter().filter(|(op, _)| op.record < records / 5).count() as f64 / ops.len() as f64;
        assert!((hot - 0.8).abs() < 0.005, "hot share {hot}");
        // The hot records' values are the first fifth of the value region.
        let layout = stream.layout();
        let values_start = layout.bucket_pages + layout.entry_pages;
        let hot_end = values_start + layout.value_pages / 5;
        let hot_pages = ops.iter().filter(|(_, accesses)| {
            let value_page = accesses.last().unwrap().page;
            (values_start..hot_end).contains(&value_page)
        });
        assert!((hot_pages.count() as f64 / ops.len() as f64 - 0.8).abs() < 0.006);
    }

    #[test]
    fn reads_touch_the_whole_value_and_updates_one_field() {
        let (stream, ops) = run(YcsbConfig::workload_a(1000), 10_000);
        for (op, accesses) in &ops {
            assert!(!accesses[0].write && accesses[0].page < stream.layout().bucket_pages);
            assert!(!accesses[1].write);
            let value_page = stream.value_offset(op.record) / PAGE_BYTES as u64;
            match op.kind {
                OpKind::Get => {
                    assert_eq!(accesses.len(), 3, "1 KiB values are page-aligned: one page");
                    assert_eq!(accesses[2], Access { page: value_page, write: false });
                    assert_eq!(op.value_bytes, 1000);
                }
                OpKind::Set => {
                    assert_eq!(accesses[2], Access { page: value_page, write: true });
                    assert_eq!(op.value_bytes, 100);
                }
            }
            assert!(accesses.iter().all(|a| a.page < stream.pages()));
        }
        // Values larger than a page span pages.
        let big = YcsbConfig { field_bytes: 1000, ..YcsbConfig::workload_a(100) };
        let (stream, ops) = run(big, 100);
        let (op, accesses) = ops.iter().find(|(op, _)| op.kind == OpKind::Get).unwrap();
        let first = stream.value_offset(op.record);
        assert_eq!(
            accesses.len() - 2,
            ((first + 10_024 - 1) / PAGE_BYTES as u64 - first / PAGE_BYTES as u64 + 1) as usize
        );
    }

    #[test]
    fn records_for_pages_is_close() {
        let config = YcsbConfig::workload_a(1);
        let records = YcsbConfig::records_for_pages(100_000, config);
        let stream = YcsbStream::new(YcsbConfig { records, ..config }, 1).unwrap();
        assert!((stream.pages() as f64 / 100_000.0 - 1.0).abs() < 0.03, "{}", stream.pages());
    }

    #[test]
    fn bad_configs_say_what_to_change() {
        let error = YcsbStream::new(YcsbConfig { read_percent: 120, ..YcsbConfig::workload_a(10) }, 1).err().unwrap();
        assert!(error.to_string().contains("0..=100"), "{error}");
        let error = YcsbStream::new(YcsbConfig::workload_a(0), 1).err().unwrap();
        assert_eq!(error, KvConfigError::NoRecords);
    }
}
