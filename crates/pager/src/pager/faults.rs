//! What the threads resolving faults share: their polling for the next fault, the
//! faults set aside, the scratch of a fault that discards while it waits for room
//! (direct reclaim), and the record of where faults' time went.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use znswap_pager_core::{DiscardBatch, FaultTask};

use super::aside::{Aside, Scratch};
use super::poll::FaultPoll;
use super::stats::{FaultRecord, FaultTimeTotals, FaultTimes};
use crate::page_buffers::AlignedPage;

/// What a thread resolving faults works in: its fault task (actions included) and a
/// page buffer (aligned, so the device reads into it without a bounce copy). Allocated
/// once per thread.
pub(super) struct FaultScratch {
    pub(super) page: Box<AlignedPage>,
    pub(super) task: FaultTask,
}

impl FaultScratch {
    pub(super) fn new() -> Box<FaultScratch> {
        Box::new(FaultScratch { page: Box::new(AlignedPage::ZERO), task: FaultTask::new() })
    }
}

impl Scratch for FaultScratch {
    fn is_idle(&self) -> bool {
        self.task.is_resolved()
    }
}

pub(super) struct Faults {
    pub(super) poll: FaultPoll,
    /// Served tenants' faults held back by their write limits, which no handler waits
    /// in (`aside.rs`).
    pub(super) aside: Aside<FaultScratch>,
    /// Scratch for a fault that discards dropped pages while it waits for room (direct
    /// reclaim); a fault that finds it busy just waits. (Taken out while in use.)
    reclaim: Mutex<Option<DiscardBatch>>,
    /// Faults' latencies and where their time went: all of them, and per engine tenant
    /// (a served process's faults, under its tenant).
    all: FaultRecord,
    tenants: Box<[FaultRecord]>,
    /// CPU time of the fault handler threads, in nanoseconds.
    pub(super) cpu_ns: AtomicU64,
    /// Dropped pages that waiting faults discarded themselves (direct reclaim).
    discarded_pages: AtomicU64,
}

impl Faults {
    pub(super) fn new(fault_poll_us: u32, reclaim: DiscardBatch, tenants: u32) -> std::io::Result<Faults> {
        Ok(Faults {
            poll: FaultPoll::new(fault_poll_us),
            aside: Aside::new(FaultScratch::new)?,
            reclaim: Mutex::new(Some(reclaim)),
            all: FaultRecord::default(),
            tenants: (0..tenants.max(1)).map(|_| FaultRecord::default()).collect(),
            cpu_ns: AtomicU64::new(0),
            discarded_pages: AtomicU64::new(0),
        })
    }

    /// The direct-reclaim scratch, if no other fault has it. Only tried, never waited
    /// for: the caller holds the state lock.
    pub(super) fn reclaim_take(&self) -> Option<DiscardBatch> {
        self.reclaim.try_lock().ok().and_then(|mut batch| batch.take())
    }

    pub(super) fn reclaim_return(&self, batch: DiscardBatch) {
        let mut slot = self.reclaim.lock().unwrap_or_else(|p| p.into_inner());
        assert!(slot.replace(batch).is_none(), "two direct-reclaim batches");
    }

    /// A fault a handler resolved in `ns`, of engine tenant `tenant` if served.
    pub(super) fn record(&self, tenant: Option<u32>, times: &FaultTimes, ns: u64) {
        self.all.record(times, ns);
        if let Some(record) = tenant.and_then(|tenant| self.tenants.get(tenant as usize)) {
            record.record(times, ns);
        }
    }

    /// A fault's parts alone (self-paging: no handler timed it whole).
    pub(super) fn add(&self, times: &FaultTimes) {
        self.all.add(times);
    }

    pub(super) fn add_discarded(&self, pages: u64) {
        self.discarded_pages.fetch_add(pages, Relaxed);
    }

    pub(super) fn discarded_pages(&self) -> u64 {
        self.discarded_pages.load(Relaxed)
    }

    /// Every fault's record.
    pub(super) fn all(&self) -> &FaultRecord {
        &self.all
    }

    /// Engine tenant `tenant`'s record, if it has one.
    pub(super) fn tenant(&self, tenant: u32) -> Option<&FaultRecord> {
        self.tenants.get(tenant as usize)
    }

    /// Where engine tenant `tenant`'s faults spent their time.
    pub(super) fn tenant_totals(&self, tenant: u32) -> FaultTimeTotals {
        self.tenant(tenant).map(FaultRecord::totals).unwrap_or_default()
    }
}
