//! What the key-value streams have in common: operations with boundaries, key
//! popularity, and mapping a record's bytes onto memory pages.

use thiserror::Error;
use znswap_core::PAGE_BYTES;

use crate::dist::{Rng, Scatter};
use crate::Access;

/// What a key-value operation does to its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// memcached `get`, YCSB `read`: reads the record.
    Get,
    /// memcached `set`, YCSB `update`: writes the record (or one field of it).
    Set,
}

/// One operation: its kind, its record and the value bytes it moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvOp {
    pub kind: OpKind,
    pub record: u64,
    pub value_bytes: u32,
}

/// An endless, deterministic stream of key-value operations over a fixed set of records,
/// each expanded into the page accesses the server makes for it. The operation's latency
/// runs from its first access to its last.
pub trait KvStream: Send {
    /// Clears `out`, fills it with the operation's page accesses in order, and returns the
    /// operation.
    fn next_op(&mut self, out: &mut Vec<Access>) -> KvOp;
    /// The memory footprint in pages: every access is to a page below this.
    fn pages(&self) -> u64;
    fn records(&self) -> u64;
}

/// Which records the operations pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Popularity {
    Uniform,
    /// `hot_access_percent` of operations pick uniformly among `hot_percent` of the
    /// records, the rest among the others (YCSB's `HotspotIntegerGenerator`).
    Hotspot {
        hot_percent: u8,
        hot_access_percent: u8,
    },
}

/// A key-value configuration that cannot work, and what to change.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KvConfigError {
    #[error("a key-value store needs at least one record; set records to 1 or more")]
    NoRecords,
    #[error("{name} is {value} %; use 0..=100")]
    PercentOutOfRange { name: &'static str, value: u32 },
    #[error("hot_percent 0 leaves no hot records to take {hot_access_percent} % of the operations; use 1..=100")]
    EmptyHotSet { hot_access_percent: u8 },
    #[error("{records} records of this size take {bytes} bytes, more than this model addresses ({max} bytes); use fewer records")]
    TooLarge { records: u64, bytes: u64, max: u64 },
    #[error("{name} is 0; use 1 or more")]
    Zero { name: &'static str },
}

impl Popularity {
    pub(crate) fn validate(&self) -> Result<(), KvConfigError> {
        if let Popularity::Hotspot { hot_percent, hot_access_percent } = *self {
            for (name, value) in [("hot_percent", hot_percent), ("hot_access_percent", hot_access_percent)] {
                if value > 100 {
                    return Err(KvConfigError::PercentOutOfRange { name, value: value as u32 });
                }
            }
            if hot_percent == 0 && hot_access_percent > 0 {
                return Err(KvConfigError::EmptyHotSet { hot_access_percent });
            }
        }
        Ok(())
    }

    /// A popularity rank in `0..records`; ranks below the hot count are the hot set.
    pub(crate) fn pick_rank(&self, rng: &mut Rng, records: u64) -> u64 {
        match *self {
            Popularity::Uniform => rng.below(records),
            Popularity::Hotspot { hot_percent, hot_access_percent } => {
                let hot = (records * hot_percent as u64 / 100).clamp(1, records);
                if hot == records || rng.percent(hot_access_percent) {
                    rng.below(hot)
                } else {
                    hot + rng.below(records - hot)
                }
            }
        }
    }
}

/// Chooses records: a popularity rank, then either the record of that id (hot records
/// side by side in memory) or a scattered one (hot records spread over memory).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordChooser {
    popularity: Popularity,
    records: u64,
    scatter: Option<Scatter>,
}

impl RecordChooser {
    pub(crate) fn new(popularity: Popularity, records: u64, scatter_key: Option<u64>) -> RecordChooser {
        RecordChooser { popularity, records, scatter: scatter_key.map(|key| Scatter::new(records, key)) }
    }

    pub(crate) fn pick(&self, rng: &mut Rng) -> u64 {
        let rank = self.popularity.pick_rank(rng, self.records);
        self.scatter.map_or(rank, |scatter| scatter.apply(rank))
    }
}

/// Appends the pages that bytes `first..first + bytes` of the arena touch.
pub(crate) fn push_span(out: &mut Vec<Access>, first_byte: u64, bytes: u64, write: bool) {
    debug_assert!(bytes > 0);
    let first_page = first_byte / PAGE_BYTES as u64;
    let last_page = (first_byte + bytes - 1) / PAGE_BYTES as u64;
    out.extend((first_page..=last_page).map(|page| Access { page, write }));
}

/// The bucket a record hashes to, in a table of `buckets` (a power of two).
pub(crate) fn bucket_of(record: u64, buckets: u64) -> u64 {
    debug_assert!(buckets.is_power_of_two());
    crate::pattern::mix64(record.wrapping_add(0x9E37_79B9_7F4A_7C15)) & (buckets - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_every_page_touched() {
        let mut out = Vec::new();
        push_span(&mut out, 4000, 200, false);
        assert_eq!(out, [Access { page: 0, write: false }, Access { page: 1, write: false }]);
        out.clear();
        push_span(&mut out, 8192, 4096, true);
        assert_eq!(out, [Access { page: 2, write: true }]);
    }

    #[test]
    fn hotspot_ranks_take_their_share() {
        let popularity = Popularity::Hotspot { hot_percent: 10, hot_access_percent: 90 };
        let mut rng = Rng::new(1);
        let draws = 200_000;
        let hot = (0..draws).filter(|_| popularity.pick_rank(&mut rng, 10_000) < 1_000).count();
        assert!((hot as f64 / draws as f64 - 0.9).abs() < 0.005, "{hot}");
        assert!(Popularity::Hotspot { hot_percent: 0, hot_access_percent: 80 }.validate().is_err());
        assert!(Popularity::Hotspot { hot_percent: 20, hot_access_percent: 101 }.validate().is_err());
    }
}
