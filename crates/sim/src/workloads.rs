//! What a tenant's threads run: a vm-scalability / pmbench page stream (each thread its
//! own slice, as `-mt` does) or a key-value server (threads share the store: each
//! thread serves its own client's operations over the whole arena).

use std::sync::Arc;

use serde::Serialize;
use znswap_workload::{
    Access, EtcConfig, EtcLayout, EtcStream, KvConfigError, KvStream, Workload, YcsbConfig, YcsbStream,
};

use crate::source::{GeneratorSource, Source, Step};

#[derive(Clone, Debug, Serialize)]
pub enum WorkSpec {
    /// A `znswap-workload` generator per thread over its own slice of the region;
    /// `fill_first`: the slice is written once in order before (pre-allocation).
    Pages { workload: Workload, fill_first: bool },
    /// memcached under Facebook's ETC (§6.2.1); the layout is shared by all threads.
    Etc {
        #[serde(skip)]
        layout: Arc<EtcLayout>,
        records: u64,
    },
    /// redis under YCSB workload A with the 20/80 hotspot (§6.2.2).
    YcsbA { records: u64 },
}

impl WorkSpec {
    /// A page stream; every workload but the sequential ones pre-allocates its set
    /// (anon-r-rand fills by itself).
    pub fn pages(workload: Workload) -> WorkSpec {
        let fill_first = !matches!(workload, Workload::AnonWSeq | Workload::AnonRRand);
        WorkSpec::Pages { workload, fill_first }
    }

    /// memcached-ETC filling about `pages` pages, keys uniform over the records (the
    /// paper's 90/10 skew scatters popular keys over memory so that page accesses are
    /// "mostly uniformly random", §6.2.1; `skewed` keeps the 90/10 key skew instead).
    pub fn etc(pages: u64, seed: u64, skewed: bool) -> Result<WorkSpec, KvConfigError> {
        let records = EtcConfig::records_for_pages(pages);
        let config = if skewed { EtcConfig::paper(records, seed) } else { EtcConfig::uniform(records, seed) };
        let layout = EtcLayout::new(&config)?;
        Ok(WorkSpec::Etc { layout: Arc::new(layout), records })
    }

    /// redis-YCSB-A filling about `pages` pages.
    pub fn ycsb_a(pages: u64) -> WorkSpec {
        let config = YcsbConfig::workload_a(1);
        WorkSpec::YcsbA { records: YcsbConfig::records_for_pages(pages, config) }
    }

    /// The pages the workload's region needs (a key-value store's arena).
    pub fn region_pages(&self, requested: u64) -> u64 {
        match self {
            WorkSpec::Pages { .. } => requested,
            WorkSpec::Etc { layout, .. } => layout.pages(),
            WorkSpec::YcsbA { records } => {
                YcsbStream::new(YcsbConfig::workload_a(*records), 0).map(|stream| stream.pages()).unwrap_or(requested)
            }
        }
    }

    /// The source of thread `thread` of `threads` over a region of `pages` pages, with
    /// the first page of its range.
    pub fn source(
        &self,
        pages: u64,
        threads: u32,
        thread: u32,
        seed: u64,
        accesses_max: Option<u64>,
    ) -> (u64, Box<dyn Source>) {
        let slice = pages / threads as u64;
        let first = slice * thread as u64;
        // The last thread takes the remainder.
        let count = if thread + 1 == threads { pages - first } else { slice };
        match self {
            WorkSpec::Pages { workload, fill_first } => {
                let source = GeneratorSource::new(*workload, count, seed, accesses_max);
                let source = if *fill_first { source.fill_first(count) } else { source };
                (first, Box::new(source))
            }
            WorkSpec::Etc { layout, .. } => {
                let stream = EtcStream::new(layout.clone(), seed);
                (0, Box::new(KvSource::new(Box::new(stream), first..first + count).with_lru_bump()))
            }
            WorkSpec::YcsbA { records } => {
                let stream = YcsbStream::new(YcsbConfig::workload_a(*records), seed).expect("a valid YCSB config");
                (0, Box::new(KvSource::new(Box::new(stream), first..first + count)))
            }
        }
    }
}

/// A key-value server thread: it first loads its share of the arena (writes in order),
/// then serves operations; each operation is a request whose latency the host records.
pub struct KvSource {
    stream: Box<dyn KvStream>,
    load_next: u64,
    load_end: u64,
    op: Vec<Access>,
    next: usize,
    lru_bump: bool,
}

impl KvSource {
    pub fn new(stream: Box<dyn KvStream>, load: std::ops::Range<u64>) -> KvSource {
        KvSource {
            stream,
            load_next: load.start,
            load_end: load.end,
            op: Vec::with_capacity(16),
            next: 0,
            lru_bump: false,
        }
    }

    /// memcached bumps an item on a get: `do_item_update` rewrites its header's access
    /// time (at most once per `ITEM_UPDATE_INTERVAL`, 60 s, which every item swapped out
    /// and back in has exceeded), so a get writes the item's first page. The ETC stream
    /// leaves this out; a swapped-in item's page is dirtied by it.
    pub fn with_lru_bump(mut self) -> KvSource {
        self.lru_bump = true;
        self
    }
}

impl Source for KvSource {
    fn next_step(&mut self) -> Option<Step> {
        if self.load_next < self.load_end {
            self.load_next += 1;
            return Some(Step { page: self.load_next - 1, write: true, request_end: false });
        }
        if self.next == self.op.len() {
            self.stream.next_op(&mut self.op);
            self.next = 0;
            assert!(!self.op.is_empty(), "a key-value operation touches at least one page");
            // The bucket comes first, then the item: its header is the second access.
            if self.lru_bump && self.op.len() > 1 {
                self.op[1].write = true;
            }
        }
        let access = self.op[self.next];
        self.next += 1;
        Some(Step { page: access.page, write: access.write, request_end: self.next == self.op.len() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kv_thread_loads_its_share_then_serves_requests() {
        let spec = WorkSpec::ycsb_a(2000);
        let pages = spec.region_pages(0);
        assert!(pages > 1000, "{pages}");
        let (first, mut source) = spec.source(pages, 4, 1, 7, None);
        assert_eq!(first, 0, "key-value threads address the whole arena");
        let share = pages / 4;
        for index in 0..share {
            let step = source.next_step().unwrap();
            assert_eq!((step.page, step.write, step.request_end), (share + index, true, false));
        }
        let mut ends = 0;
        for _ in 0..1000 {
            let step = source.next_step().unwrap();
            assert!(step.page < pages);
            ends += step.request_end as u32;
        }
        assert!((100..500).contains(&ends), "YCSB operations touch a few pages each: {ends} ends");
    }
}
