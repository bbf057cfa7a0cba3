//! Zone-append merges (ZNSwap §5.3): appends queued for one zone while the device is
//! busy go out as one device append; each caller gets its own LBA back.
//!
//! Mechanism (flat combining, no extra thread): a caller copies its pages into the
//! zone's pending batch. If fewer than `max_inflight` batches of that zone are at the
//! device, the caller becomes the batch's *leader*: it takes the whole pending batch,
//! issues one device append, and publishes the first LBA to every member; otherwise it
//! waits, and whoever finds a free slot next carries its batch. Batches are bounded by
//! the device's zone append limit; their buffers are allocated once, up front.
//!
//! Ordering guarantees:
//! - Each append's pages land contiguously at the LBA returned to its caller.
//! - Inside one batch, pages are laid out in the order callers joined it.
//! - Between batches in flight at the same time there is no order (as between any two
//!   zone appends); a caller that waits for each append before issuing the next sees
//!   its LBAs increase within a zone.
//! - A failed batch fails each member with the same error; nothing of it is written
//!   (the device validates before it writes).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex, MutexGuard};

use serde::Serialize;

use crate::device::{DeviceCounters, FaultInjector, ZoneCounters, ZonedDevice};
use crate::error::{Result, ZoneError};
use crate::geometry::Geometry;
use crate::zone::{ZoneInfo, ZoneOp};

/// A batch being filled or carried to the device.
#[derive(Default)]
struct Batch {
    data: Vec<u8>,
    metadata: Vec<u8>,
    members: u32,
}

struct Finished {
    sequence: u64,
    first_lba: Result<u64>,
    waiting: u32,
}

struct QueueState {
    pending: Batch,
    /// Sequence number of the pending batch; batches are numbered per zone.
    pending_sequence: u64,
    in_flight: usize,
    spare: Vec<Batch>,
    finished: Vec<Finished>,
}

struct ZoneQueue {
    state: Mutex<QueueState>,
    changed: Condvar,
}

/// What merging achieved: `requests / device_appends` is the merge factor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MergeStats {
    pub requests: u64,
    pub device_appends: u64,
}

/// A [`ZonedDevice`] whose appends are merged per zone; every other command passes
/// straight through.
pub struct AppendMerger<D: ZonedDevice> {
    device: D,
    queues: Box<[ZoneQueue]>,
    max_inflight: usize,
    requests: AtomicU64,
    device_appends: AtomicU64,
}

impl<D: ZonedDevice> AppendMerger<D> {
    /// Merges appends over `device`, letting up to `max_inflight` merged appends per zone
    /// reach the device at once (at least 1).
    pub fn new(device: D, max_inflight: usize) -> AppendMerger<D> {
        let max_inflight = max_inflight.max(1);
        let geometry = *device.geometry();
        let batch_bytes = geometry.zone_append_max_bytes as usize;
        let metadata_bytes = batch_bytes / geometry.lba_bytes as usize * geometry.metadata_bytes as usize;
        let batch = || Batch {
            data: Vec::with_capacity(batch_bytes),
            metadata: Vec::with_capacity(metadata_bytes),
            members: 0,
        };
        let queues = (0..geometry.zone_count)
            .map(|_| ZoneQueue {
                state: Mutex::new(QueueState {
                    pending: batch(),
                    pending_sequence: 0,
                    in_flight: 0,
                    spare: (0..max_inflight).map(|_| batch()).collect(),
                    finished: Vec::with_capacity(max_inflight),
                }),
                changed: Condvar::new(),
            })
            .collect();
        AppendMerger { device, queues, max_inflight, requests: AtomicU64::new(0), device_appends: AtomicU64::new(0) }
    }

    pub fn inner(&self) -> &D {
        &self.device
    }

    pub fn stats(&self) -> MergeStats {
        MergeStats { requests: self.requests.load(Relaxed), device_appends: self.device_appends.load(Relaxed) }
    }

    fn lock(queue: &ZoneQueue) -> MutexGuard<'_, QueueState> {
        queue.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests waiting in `zone`'s pending batch (for tests and monitoring).
    pub fn pending_requests(&self, zone: u32) -> u32 {
        Self::lock(&self.queues[zone as usize]).pending.members
    }

    /// Takes the pending batch to the device and publishes its result. Called with the
    /// queue lock held and a free in-flight slot; returns with the lock held.
    fn lead<'q>(
        &self,
        zone: u32,
        queue: &'q ZoneQueue,
        mut state: MutexGuard<'q, QueueState>,
    ) -> MutexGuard<'q, QueueState> {
        debug_assert!(state.in_flight < self.max_inflight && state.pending.members > 0);
        let replacement = state.spare.pop().expect("one spare batch per in-flight slot");
        let batch = std::mem::replace(&mut state.pending, replacement);
        let sequence = state.pending_sequence;
        state.pending_sequence += 1;
        state.in_flight += 1;
        drop(state);

        let metadata = (self.device.geometry().metadata_bytes != 0).then_some(batch.metadata.as_slice());
        let first_lba = self.device.append(zone, &batch.data, metadata);
        self.device_appends.fetch_add(1, Relaxed);

        let mut state = Self::lock(queue);
        state.in_flight -= 1;
        state.finished.push(Finished { sequence, first_lba, waiting: batch.members });
        let mut batch = batch;
        batch.data.clear();
        batch.metadata.clear();
        batch.members = 0;
        state.spare.push(batch);
        queue.changed.notify_all();
        state
    }
}

impl<D: ZonedDevice> ZonedDevice for AppendMerger<D> {
    fn geometry(&self) -> &Geometry {
        self.device.geometry()
    }

    fn report_zone(&self, zone: u32) -> Result<ZoneInfo> {
        self.device.report_zone(zone)
    }

    fn report_zones(&self) -> Result<Vec<ZoneInfo>> {
        self.device.report_zones()
    }

    fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>) -> Result<()> {
        self.device.read(lba, data, metadata)
    }

    fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()> {
        self.device.write(lba, data, metadata)
    }

    fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64> {
        let geometry = *self.device.geometry();
        let queue = self
            .queues
            .get(zone as usize)
            .ok_or(ZoneError::InvalidZone { zone: zone as u64, zone_count: geometry.zone_count })?;
        // A request the device would refuse must not join (and sink) a batch: send it
        // alone so its caller gets the device's own error.
        let metadata_expected = data.len() / geometry.lba_bytes as usize * geometry.metadata_bytes as usize;
        let valid = !data.is_empty()
            && data.len() % geometry.write_granularity_bytes as usize == 0
            && data.len() <= geometry.zone_append_max_bytes as usize
            && metadata.is_none_or(|m| m.len() == metadata_expected || (m.is_empty() && metadata_expected == 0));
        if !valid {
            return self.device.append(zone, data, metadata);
        }
        self.requests.fetch_add(1, Relaxed);
        let limit = geometry.zone_append_max_bytes as usize;
        let mut state = Self::lock(queue);
        // Join a pending batch with room for us.
        let (sequence, offset_bytes) = loop {
            if state.pending.data.len() + data.len() <= limit {
                let offset = state.pending.data.len();
                state.pending.data.extend_from_slice(data);
                match metadata {
                    Some(m) if geometry.metadata_bytes != 0 => state.pending.metadata.extend_from_slice(m),
                    _ => {
                        let len = state.pending.metadata.len() + metadata_expected;
                        state.pending.metadata.resize(len, 0);
                    }
                }
                state.pending.members += 1;
                break (state.pending_sequence, offset);
            }
            if state.in_flight < self.max_inflight {
                state = self.lead(zone, queue, state);
            } else {
                state = queue.changed.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        };
        // Wait for our batch's result, carrying batches to the device when a slot is free.
        loop {
            if let Some(index) = state.finished.iter().position(|f| f.sequence == sequence) {
                let finished = &mut state.finished[index];
                let first_lba = finished.first_lba.clone();
                finished.waiting -= 1;
                if finished.waiting == 0 {
                    state.finished.swap_remove(index);
                }
                return first_lba.map(|first| first + offset_bytes as u64 / geometry.lba_bytes as u64);
            }
            if state.pending_sequence == sequence && state.in_flight < self.max_inflight {
                state = self.lead(zone, queue, state);
            } else {
                state = queue.changed.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        }
    }

    fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()> {
        self.device.zone_op(zone, op)
    }

    fn sync(&self) -> Result<()> {
        self.device.sync()
    }

    fn counters(&self) -> DeviceCounters {
        self.device.counters()
    }

    fn zone_counters(&self, zone: u32) -> Result<ZoneCounters> {
        self.device.zone_counters(zone)
    }

    fn fault_injector(&self) -> Option<&dyn FaultInjector> {
        self.device.fault_injector()
    }

    fn counters_persist(&self) -> bool {
        self.device.counters_persist()
    }

    fn save_counters(&self) {
        self.device.save_counters()
    }

    fn describe(&self) -> String {
        format!("{} with append merging", self.device.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemDevice;
    use std::sync::atomic::AtomicBool;

    /// A device whose appends wait at a gate, so a test can pile requests up behind one.
    struct Gated {
        inner: MemDevice,
        open: Mutex<bool>,
        opened: Condvar,
        entered: AtomicBool,
    }

    impl Gated {
        fn release(&self) {
            *self.open.lock().unwrap() = true;
            self.opened.notify_all();
        }
    }

    impl ZonedDevice for Gated {
        fn geometry(&self) -> &Geometry {
            self.inner.geometry()
        }
        fn report_zone(&self, zone: u32) -> Result<ZoneInfo> {
            self.inner.report_zone(zone)
        }
        fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>) -> Result<()> {
            self.inner.read(lba, data, metadata)
        }
        fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()> {
            self.inner.write(lba, data, metadata)
        }
        fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64> {
            self.entered.store(true, Relaxed);
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
            drop(open);
            self.inner.append(zone, data, metadata)
        }
        fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()> {
            self.inner.zone_op(zone, op)
        }
        fn sync(&self) -> Result<()> {
            Ok(())
        }
        fn counters(&self) -> DeviceCounters {
            self.inner.counters()
        }
        fn zone_counters(&self, zone: u32) -> Result<ZoneCounters> {
            self.inner.zone_counters(zone)
        }
        fn describe(&self) -> String {
            "gated".into()
        }
    }

    fn geometry() -> Geometry {
        Geometry::from_bytes(4096, 16, 4, 1 << 20, 1 << 20, 0, 0, 4096).unwrap()
    }

    fn page(tag: u8) -> (Vec<u8>, Vec<u8>) {
        (vec![tag; 4096], vec![tag; 16])
    }

    #[test]
    fn appends_queued_behind_a_busy_zone_merge_into_one() {
        let gated = Gated {
            inner: MemDevice::new(geometry()).unwrap(),
            open: Mutex::new(false),
            opened: Condvar::new(),
            entered: AtomicBool::new(false),
        };
        let merger = AppendMerger::new(gated, 1);
        std::thread::scope(|scope| {
            let first = scope.spawn(|| {
                let (data, metadata) = page(1);
                merger.append(2, &data, Some(&metadata)).unwrap()
            });
            while !merger.inner().entered.load(Relaxed) {
                std::thread::yield_now();
            }
            let followers: Vec<_> = (2..=6u8)
                .map(|tag| {
                    let merger = &merger;
                    scope.spawn(move || {
                        let (data, metadata) = page(tag);
                        (tag, merger.append(2, &data, Some(&metadata)).unwrap())
                    })
                })
                .collect();
            while merger.pending_requests(2) < 5 {
                std::thread::yield_now();
            }
            merger.inner().release();
            let start = geometry().zone_start_lba(2);
            assert_eq!(first.join().unwrap(), start);
            let mut lbas: Vec<(u8, u64)> = followers.into_iter().map(|f| f.join().unwrap()).collect();
            lbas.sort_by_key(|&(_, lba)| lba);
            let placed: Vec<u64> = lbas.iter().map(|&(_, lba)| lba).collect();
            assert_eq!(placed, (start + 1..start + 6).collect::<Vec<_>>(), "each page got its own LBA");
            for (tag, lba) in lbas {
                let mut data = vec![0; 4096];
                let mut metadata = vec![0; 16];
                merger.read(lba, &mut data, Some(&mut metadata)).unwrap();
                assert!(
                    data.iter().all(|&b| b == tag) && metadata.iter().all(|&b| b == tag),
                    "page {tag} at LBA {lba}"
                );
            }
        });
        assert_eq!(merger.stats(), MergeStats { requests: 6, device_appends: 2 });
    }

    #[test]
    fn a_bad_request_fails_alone() {
        let merger = AppendMerger::new(MemDevice::new(geometry()).unwrap(), 2);
        assert!(matches!(merger.append(0, &[0; 100], None), Err(ZoneError::Misaligned { .. })));
        assert!(matches!(merger.append(0, &[0; 4096], Some(&[0; 3])), Err(ZoneError::MetadataLength { .. })));
        assert!(matches!(merger.append(9, &[0; 4096], None), Err(ZoneError::InvalidZone { .. })));
        assert_eq!(merger.append(0, &[7; 4096], None).unwrap(), 0);
        assert_eq!(merger.stats().requests, 1);
    }

    #[test]
    fn many_threads_fill_a_zone_exactly() {
        let geometry = Geometry::from_bytes(4096, 8, 2, 1 << 20, 512 << 10, 0, 0, 4096).unwrap();
        let merger = AppendMerger::new(MemDevice::new(geometry).unwrap(), 2);
        let per_thread = 32usize;
        let lbas: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4u8)
                .map(|thread| {
                    let merger = &merger;
                    scope.spawn(move || {
                        (0..per_thread)
                            .map(|i| {
                                let tag = thread * 64 + i as u8;
                                merger.append(1, &vec![tag; 4096], Some(&[tag; 8])).unwrap()
                            })
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<u64> = lbas.iter().flatten().copied().collect();
        all.sort_unstable();
        let start = geometry.zone_start_lba(1);
        assert_eq!(all, (start..start + 128).collect::<Vec<_>>());
        for (thread, placed) in lbas.iter().enumerate() {
            assert!(placed.windows(2).all(|w| w[0] < w[1]), "a waiting caller's LBAs increase");
            for (i, &lba) in placed.iter().enumerate() {
                let mut data = vec![0; 4096];
                merger.read(lba, &mut data, None).unwrap();
                assert!(data.iter().all(|&b| b == thread as u8 * 64 + i as u8));
            }
        }
        assert_eq!(merger.report_zone(1).unwrap().condition, crate::ZoneCondition::Full);
    }
}
