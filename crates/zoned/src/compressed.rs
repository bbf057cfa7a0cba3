//! A compressed pool in front of a zoned device: what is appended is also kept in RAM,
//! compressed, and a read of LBAs the pool holds is served from it with no device
//! command. Zswap's pool, at the device's edge.
//!
//! Write-through: every append still reaches the device, so the pool never holds the
//! only copy of anything; dropping an entry (the oldest first, when the pool is full) is
//! free, and a device error, a fork or a crash loses nothing the pool held.
//!
//! # Why an entry can be trusted
//! An LBA of a zoned device is written once between resets of its zone. An entry is
//! made from the bytes an append wrote, after the device accepted them, and stamped with
//! its zone's reset count (its generation); a reset of the zone (or of all zones) bumps
//! the generation, so the entries made before it no longer match, and a `write` at an
//! LBA drops its entry. So while the stamp matches, the entry equals the LBA's data.
//!
//! # The ring
//! Entries live in one buffer of the pool's size, allocated at start (its pages become
//! resident as they fill): each is a 16-byte header (LBA, length) and the lz4 block,
//! padded to 8 bytes, written at the head; when an entry does not fit before the
//! buffer's end, the rest of the buffer is skipped (a marker says so) and the head
//! wraps. Room is made by dropping the oldest entries at the tail. The index maps an LBA
//! to its newest entry; an older one the tail meets is garbage (a re-append after a
//! reset, or a stale generation).
//!
//! ```text
//!   0        tail (oldest)                head (next)          size
//!   | garbage |[hdr|lz4][hdr|lz4] ... [hdr|lz4]|   free    |marker|
//! ```
//!
//! The pool serves what the device holds; it does not know what the device would refuse:
//! a zone taken offline (or a read failure injected) after its pages were kept still
//! reads from the pool, with the right bytes, until the zone is reset.
//!
//! A page that does not compress to `ACCEPT_BYTES` or less is not kept (zswap's
//! `accept_threshold`): the pool's bytes go to pages that save the most reads per byte.
//! Where nothing compresses (random or already compressed data), trying every page
//! costs a compression per page written for nothing: after a run of refusals only one
//! page in a stride is tried, the stride doubling while refusals go on and back to one
//! at the first page kept ([`Backoff`]). A page not tried is treated as refused.
//! Reads with metadata, and reads of LBAs not all in the pool, go to the device.
//!
//! lz4 (the `lz4_flex` crate, safe pure Rust): compresses a 4 KiB page in a few
//! microseconds and decompresses it in about one, far below a device read; the
//! interpreters' heaps compress 2-4.5x with it (docs/measurements/2026-12-suite.md).

use std::collections::HashMap;
use std::io::IoSlice;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::device::{DeviceCounters, FaultInjector, ZoneCounters, ZonedDevice};
use crate::error::Result;
use crate::geometry::Geometry;
use crate::zone::{ZoneInfo, ZoneOp};

/// The largest compressed LBA of 4 KiB the pool keeps: three quarters of it.
const ACCEPT_BYTES: usize = 3072;
/// An entry's header: the LBA (8 bytes), the block's length (4), and its zone's
/// generation (4).
const HEADER_BYTES: usize = 16;
/// A header's length that says "the rest of the buffer is skipped".
const WRAP_MARKER: u32 = u32::MAX;
/// Room for lz4's largest output for an LBA of up to 4 KiB (larger LBAs are not kept).
const COMPRESS_BUFFER_BYTES: usize = 4608;
/// Refusals in a row before the pool tries fewer pages, and the widest stride then.
const REFUSALS_BEFORE_BACKOFF: u32 = 16;
const STRIDE_MAX: u32 = 64;
/// The smallest pool: a few entries of the largest size.
pub const COMPRESSED_POOL_MIN_BYTES: u64 = 64 << 10;

/// What the pool held and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoolStats {
    /// The pool's size, bytes.
    pub capacity_bytes: u64,
    /// Bytes of the buffer between its oldest entry and its head (entries, garbage
    /// among them, and skipped ends).
    pub used_bytes: u64,
    /// LBAs the pool holds an entry for now (entries of zones reset since among them,
    /// until the tail drops them).
    pub pages_held: u64,
    /// LBAs appended and kept, and the bytes they took compressed and before.
    pub pages_stored: u64,
    pub stored_bytes: u64,
    pub stored_raw_bytes: u64,
    /// LBAs appended that did not compress to the threshold (sent to the device only),
    /// and LBAs not tried at all after a run of refusals ([`Backoff`]).
    pub pages_refused: u64,
    pub pages_skipped: u64,
    /// Reads served from the pool (no device command), and the LBAs they read.
    pub reads_served: u64,
    pub pages_served: u64,
    /// Reads without metadata the pool could not serve whole (a device read).
    pub reads_missed: u64,
    /// Entries dropped, oldest first, to make room.
    pub pages_dropped: u64,
}

impl PoolStats {
    /// How much the kept pages shrank (`compression_ratio`).
    pub fn ratio(&self) -> f64 {
        compression_ratio(self.stored_raw_bytes, self.stored_bytes)
    }
}

/// Bytes before compression over bytes after (0 when nothing was kept): the one
/// definition of the pool's ratio, for its figures wherever they are shown.
pub fn compression_ratio(raw_bytes: u64, stored_bytes: u64) -> f64 {
    if stored_bytes == 0 {
        0.0
    } else {
        raw_bytes as f64 / stored_bytes as f64
    }
}

/// Which pages are tried: all of them until `REFUSALS_BEFORE_BACKOFF` refusals in a
/// row, then one in `stride`, the stride doubling at each refusal (up to `STRIDE_MAX`)
/// and back to one at the first page kept. Bounds what compression costs where nothing
/// compresses to one try in `STRIDE_MAX` pages, and what it misses where data turns
/// compressible again to `STRIDE_MAX` pages.
#[derive(Debug, Default)]
struct Backoff {
    refused_in_row: u32,
    stride: u32,
    /// Pages to pass over before the next try.
    skip: u32,
}

impl Backoff {
    /// Whether to try the next page.
    fn try_next(&mut self) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    /// A page tried was kept or refused.
    fn tried(&mut self, kept: bool) {
        if kept {
            *self = Backoff::default();
            return;
        }
        self.refused_in_row = self.refused_in_row.saturating_add(1);
        if self.refused_in_row >= REFUSALS_BEFORE_BACKOFF {
            self.stride = (self.stride.max(1) * 2).min(STRIDE_MAX);
            self.skip = self.stride - 1;
        }
    }
}

#[derive(Clone, Copy)]
struct Entry {
    /// Where its header starts, as a position that only grows (the buffer's offset is
    /// this modulo its size).
    at: u64,
    len: u32,
    generation: u32,
}

struct Ring {
    buffer: Box<[u8]>,
    /// Positions of the oldest entry and of the next; `head - tail <= buffer.len()`.
    tail: u64,
    head: u64,
    index: HashMap<u64, Entry>,
    /// Each zone's reset count.
    generations: Vec<u32>,
}

impl Ring {
    fn size(&self) -> u64 {
        self.buffer.len() as u64
    }

    /// Entry `lba` if it is current (its zone not reset since).
    fn current(&self, lba: u64, zone: u32) -> Option<Entry> {
        self.index.get(&lba).copied().filter(|entry| entry.generation == self.generations[zone as usize])
    }

    /// Drops the oldest entry (or skipped end) at the tail.
    fn drop_oldest(&mut self, dropped: &AtomicU64) {
        assert!(self.tail < self.head, "dropping from an empty pool");
        let size = self.size();
        let offset = (self.tail % size) as usize;
        if size as usize - offset < HEADER_BYTES {
            self.tail += size - offset as u64;
            return;
        }
        let header = &self.buffer[offset..offset + HEADER_BYTES];
        let len = u32::from_le_bytes(header[8..12].try_into().unwrap());
        if len == WRAP_MARKER {
            self.tail += size - offset as u64;
            return;
        }
        let lba = u64::from_le_bytes(header[..8].try_into().unwrap());
        if self.index.get(&lba).is_some_and(|entry| entry.at == self.tail) {
            self.index.remove(&lba);
            dropped.fetch_add(1, Relaxed);
        }
        self.tail += entry_bytes(len as usize) as u64;
        assert!(self.tail <= self.head, "an entry ran past the head");
    }

    /// Keeps `block` as LBA `lba`'s data, of its zone's generation `generation`, dropping
    /// the oldest entries to make room.
    fn insert(&mut self, lba: u64, generation: u32, block: &[u8], dropped: &AtomicU64) {
        let size = self.size();
        let need = entry_bytes(block.len()) as u64;
        assert!(need <= size, "an entry larger than the pool");
        // Where it goes: here, or at the buffer's start when it would cross the end.
        let offset = self.head % size;
        let at = if offset + need > size { self.head + (size - offset) } else { self.head };
        while at + need - self.tail > size {
            self.drop_oldest(dropped);
        }
        if at != self.head && size - offset >= HEADER_BYTES as u64 {
            let marker = offset as usize;
            self.buffer[marker + 8..marker + 12].copy_from_slice(&WRAP_MARKER.to_le_bytes());
        }
        let start = (at % size) as usize;
        self.buffer[start..start + 8].copy_from_slice(&lba.to_le_bytes());
        self.buffer[start + 8..start + 12].copy_from_slice(&(block.len() as u32).to_le_bytes());
        self.buffer[start + 12..start + 16].copy_from_slice(&generation.to_le_bytes());
        self.buffer[start + HEADER_BYTES..start + HEADER_BYTES + block.len()].copy_from_slice(block);
        self.head = at + need;
        self.index.insert(lba, Entry { at, len: block.len() as u32, generation });
    }

    fn block(&self, entry: Entry) -> &[u8] {
        let start = (entry.at % self.size()) as usize + HEADER_BYTES;
        &self.buffer[start..start + entry.len as usize]
    }
}

/// An entry's bytes in the buffer: its header and block, padded to 8.
fn entry_bytes(block: usize) -> usize {
    (HEADER_BYTES + block).next_multiple_of(8)
}

/// A [`ZonedDevice`] whose appends are also kept compressed in RAM, and whose reads are
/// served from there when they can be; every other command passes straight through.
pub struct CompressedPool {
    device: Arc<dyn ZonedDevice>,
    ring: Mutex<Ring>,
    backoff: Mutex<Backoff>,
    capacity_bytes: u64,
    pages_stored: AtomicU64,
    stored_bytes: AtomicU64,
    stored_raw_bytes: AtomicU64,
    pages_refused: AtomicU64,
    pages_skipped: AtomicU64,
    reads_served: AtomicU64,
    pages_served: AtomicU64,
    reads_missed: AtomicU64,
    pages_dropped: AtomicU64,
}

impl CompressedPool {
    /// A pool of `bytes` (at least [`COMPRESSED_POOL_MIN_BYTES`]) over `device`, empty.
    pub fn new(device: Arc<dyn ZonedDevice>, bytes: u64) -> CompressedPool {
        assert!(bytes >= COMPRESSED_POOL_MIN_BYTES, "a compressed pool of {bytes} B is below its least");
        let zones = device.geometry().zone_count as usize;
        // Zeroed allocations this large come from fresh mappings: resident as they fill.
        let buffer = vec![0u8; bytes as usize].into_boxed_slice();
        // About the entries a pool of pages compressed 4x holds.
        let index = HashMap::with_capacity((bytes / 1024) as usize);
        CompressedPool {
            device,
            ring: Mutex::new(Ring { buffer, tail: 0, head: 0, index, generations: vec![0; zones] }),
            backoff: Mutex::new(Backoff::default()),
            capacity_bytes: bytes,
            pages_stored: AtomicU64::new(0),
            stored_bytes: AtomicU64::new(0),
            stored_raw_bytes: AtomicU64::new(0),
            pages_refused: AtomicU64::new(0),
            pages_skipped: AtomicU64::new(0),
            reads_served: AtomicU64::new(0),
            pages_served: AtomicU64::new(0),
            reads_missed: AtomicU64::new(0),
            pages_dropped: AtomicU64::new(0),
        }
    }

    pub fn stats(&self) -> PoolStats {
        let (used_bytes, pages_held) = {
            let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
            (ring.head - ring.tail, ring.index.len() as u64)
        };
        PoolStats {
            capacity_bytes: self.capacity_bytes,
            used_bytes,
            pages_held,
            pages_stored: self.pages_stored.load(Relaxed),
            stored_bytes: self.stored_bytes.load(Relaxed),
            stored_raw_bytes: self.stored_raw_bytes.load(Relaxed),
            pages_refused: self.pages_refused.load(Relaxed),
            pages_skipped: self.pages_skipped.load(Relaxed),
            reads_served: self.reads_served.load(Relaxed),
            pages_served: self.pages_served.load(Relaxed),
            reads_missed: self.reads_missed.load(Relaxed),
            pages_dropped: self.pages_dropped.load(Relaxed),
        }
    }

    /// Zone `zone`'s generation now (0 for a zone beyond the device: its commands fail).
    fn generation(&self, zone: u32) -> u32 {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.generations.get(zone as usize).copied().unwrap_or(0)
    }

    /// Keeps the LBAs from `lba` on, `data` their bytes as the device accepted them,
    /// stamped with `generation`, their zone's before the append was issued (a reset
    /// that raced the append leaves them stale at once).
    fn keep(&self, lba: u64, data: &[u8], generation: u32) {
        let lba_bytes = self.device.geometry().lba_bytes as usize;
        let accept = ACCEPT_BYTES * lba_bytes / 4096;
        // Compressed outside the lock, one LBA at a time into a buffer on the stack.
        let mut block = [0u8; COMPRESS_BUFFER_BYTES];
        for (i, raw) in data.chunks_exact(lba_bytes).enumerate() {
            let tried = self.backoff.lock().unwrap_or_else(|p| p.into_inner()).try_next();
            let len = if !tried {
                usize::MAX
            } else if lz4_flex::block::get_maximum_output_size(raw.len()) <= block.len() {
                lz4_flex::block::compress_into(raw, &mut block).unwrap_or(usize::MAX)
            } else {
                usize::MAX
            };
            if tried {
                self.backoff.lock().unwrap_or_else(|p| p.into_inner()).tried(len <= accept);
            }
            if len > accept {
                // No entry of an older generation may stand for this LBA now: only the
                // generation's count would keep it out, and that count wraps.
                self.ring.lock().unwrap_or_else(|p| p.into_inner()).index.remove(&(lba + i as u64));
                let counter = if tried { &self.pages_refused } else { &self.pages_skipped };
                counter.fetch_add(1, Relaxed);
                continue;
            }
            let at = lba + i as u64;
            {
                let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
                ring.insert(at, generation, &block[..len], &self.pages_dropped);
            }
            self.pages_stored.fetch_add(1, Relaxed);
            self.stored_bytes.fetch_add(len as u64, Relaxed);
            self.stored_raw_bytes.fetch_add(raw.len() as u64, Relaxed);
        }
    }

    /// Serves `data` (one LBA or more) from `lba` on from the pool if it holds every LBA
    /// of it, all in one zone; otherwise `false`, with `data` partly written (the device
    /// read that follows writes all of it).
    fn serve(&self, lba: u64, data: &mut [u8]) -> bool {
        let geometry = self.device.geometry();
        let lba_bytes = geometry.lba_bytes as usize;
        let last = lba.checked_add((data.len() / lba_bytes) as u64 - 1);
        let (Some(zone), Some(last_zone)) = (geometry.zone_of(lba), last.and_then(|last| geometry.zone_of(last)))
        else {
            return false;
        };
        if last_zone != zone {
            return false;
        }
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        for (at, out) in (lba..).zip(data.chunks_exact_mut(lba_bytes)) {
            let Some(entry) = ring.current(at, zone) else { return false };
            let written = lz4_flex::block::decompress_into(ring.block(entry), out);
            assert_eq!(written.ok(), Some(lba_bytes), "pool entry of LBA {at} does not decompress");
        }
        true
    }

    /// Every entry of `zone` made before now no longer matches.
    fn forget_zone(&self, zone: u32) {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(generation) = ring.generations.get_mut(zone as usize) {
            *generation = generation.wrapping_add(1);
        }
    }
}

impl ZonedDevice for CompressedPool {
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
        if metadata.is_none() && !data.is_empty() && data.len() % self.geometry().lba_bytes as usize == 0 {
            if self.serve(lba, data) {
                self.reads_served.fetch_add(1, Relaxed);
                self.pages_served.fetch_add((data.len() / self.geometry().lba_bytes as usize) as u64, Relaxed);
                return Ok(());
            }
            self.reads_missed.fetch_add(1, Relaxed);
        }
        self.device.read(lba, data, metadata)
    }

    fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()> {
        // Whatever the pool held of these LBAs is stale from the moment the write starts.
        let count = data.len() as u64 / self.geometry().lba_bytes as u64;
        {
            let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
            for at in lba..lba.saturating_add(count).min(self.geometry().total_lbas()) {
                ring.index.remove(&at);
            }
        }
        self.device.write(lba, data, metadata)
    }

    fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64> {
        let generation = self.generation(zone);
        let lba = self.device.append(zone, data, metadata)?;
        self.keep(lba, data, generation);
        Ok(lba)
    }

    fn append_vectored(&self, zone: u32, data: &[IoSlice<'_>], metadata: Option<&[u8]>) -> Result<u64> {
        let generation = self.generation(zone);
        let lba = self.device.append_vectored(zone, data, metadata)?;
        let lba_bytes = self.geometry().lba_bytes as u64;
        if data.iter().all(|piece| (piece.len() as u64).is_multiple_of(lba_bytes)) {
            let mut at = lba;
            for piece in data {
                self.keep(at, piece, generation);
                at += piece.len() as u64 / lba_bytes;
            }
        } else {
            // Pieces that split LBAs: kept from one copy of the whole (not the pager's way).
            let whole: Vec<u8> = data.iter().flat_map(|piece| piece.iter().copied()).collect();
            self.keep(lba, &whole, generation);
        }
        Ok(lba)
    }

    fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()> {
        if op != ZoneOp::Reset {
            return self.device.zone_op(zone, op);
        }
        // Before the reset, so a read racing it never gets the old bytes from here; and
        // after, so an append that raced it (stamped between the two, landed before the
        // reset) is stale too.
        self.forget_zone(zone);
        let reset = self.device.zone_op(zone, op);
        self.forget_zone(zone);
        reset
    }

    fn reset_all(&self) -> Result<()> {
        for zone in 0..self.geometry().zone_count {
            self.forget_zone(zone);
        }
        let reset = self.device.reset_all();
        for zone in 0..self.geometry().zone_count {
            self.forget_zone(zone);
        }
        reset
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

    fn counters_persist(&self) -> bool {
        self.device.counters_persist()
    }

    fn save_counters(&self) {
        self.device.save_counters()
    }

    fn fault_injector(&self) -> Option<&dyn FaultInjector> {
        self.device.fault_injector()
    }

    fn describe(&self) -> String {
        format!("{} with a compressed pool of {}", self.device.describe(), crate::format_size(self.capacity_bytes))
    }
}

#[cfg(test)]
mod tests {
    use rand_core::{RngCore, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;

    use super::*;
    use crate::MemDevice;

    fn geometry() -> Geometry {
        Geometry::from_bytes(4096, 16, 8, 64 << 10, 64 << 10, 0, 0, 4096).unwrap()
    }

    /// A page of `seed`'s pattern: compressible (runs of a few bytes), or random.
    fn page(seed: u64, compressible: bool) -> Vec<u8> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut page = vec![0u8; 4096];
        if compressible {
            for run in page.chunks_mut(64) {
                run.fill(rng.next_u32() as u8);
            }
        } else {
            rng.fill_bytes(&mut page);
        }
        page
    }

    /// Seeded random appends, reads, resets and writes against a pool over a memory
    /// device and a plain memory device: every read returns the same bytes from both
    /// (the plain device is the oracle), and the pool served some of them. Odd seeds
    /// append mostly pages that compress; even seeds alternate between that and stretches
    /// of pages that mostly do not (the backoff passes pages over, and their LBAs must
    /// not keep older entries).
    #[test]
    fn every_read_equals_the_devices_under_random_appends_resets_and_wrap() {
        let mut skipped = 0;
        for seed in 0..20u64 {
            let compressible = |rng: &mut Xoshiro256PlusPlus, step: u64| match seed % 2 == 0 && step / 500 % 2 == 1 {
                true => rng.next_u32() % 16 == 0,
                false => rng.next_u32() % 4 != 0,
            };
            let plain = MemDevice::new(geometry()).unwrap();
            let pool = CompressedPool::new(Arc::new(MemDevice::new(geometry()).unwrap()), COMPRESSED_POOL_MIN_BYTES);
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let zones = geometry().zone_count;
            let lbas_per_zone = geometry().zone_size_lbas;
            for step in 0..4000u64 {
                let zone = rng.next_u32() % zones;
                match rng.next_u32() % 10 {
                    0..=3 => {
                        let pages = 1 + rng.next_u32() % 4;
                        let data: Vec<u8> =
                            (0..pages).flat_map(|i| page(step * 8 + i as u64, compressible(&mut rng, step))).collect();
                        let expected = plain.append(zone, &data, None);
                        let got = pool.append(zone, &data, None);
                        assert_eq!(expected.ok(), got.ok(), "seed {seed} step {step}: append to zone {zone}");
                    }
                    4 => {
                        plain.reset(zone).unwrap();
                        pool.reset(zone).unwrap();
                    }
                    _ => {
                        let pages = 1 + rng.next_u32() as u64 % 3;
                        let lba = zone as u64 * lbas_per_zone + rng.next_u64() % (lbas_per_zone - pages + 1);
                        let mut expected = vec![0u8; pages as usize * 4096];
                        let mut got = vec![1u8; pages as usize * 4096];
                        let (a, b) = (plain.read(lba, &mut expected, None), pool.read(lba, &mut got, None));
                        assert_eq!(a.is_ok(), b.is_ok(), "seed {seed} step {step}: read of {lba}");
                        if a.is_ok() {
                            assert!(expected == got, "seed {seed} step {step}: read of {pages} at LBA {lba} differs");
                        }
                    }
                }
            }
            let stats = pool.stats();
            assert!(stats.pages_served > 0 && stats.pages_dropped > 0, "seed {seed}: {stats:?}");
            assert!(stats.pages_refused > 0 && stats.used_bytes <= stats.capacity_bytes, "seed {seed}: {stats:?}");
            skipped += stats.pages_skipped;
        }
        assert!(skipped > 1000, "the backoff passed over {skipped} pages");
    }

    /// Refusals in a row make the tries sparse, up to one in `STRIDE_MAX`; a page kept
    /// makes every page tried again.
    #[test]
    fn the_backoff_tries_fewer_pages_while_none_is_kept() {
        let mut backoff = Backoff::default();
        let mut tries = 0;
        for _ in 0..10_000 {
            if backoff.try_next() {
                tries += 1;
                backoff.tried(false);
            }
        }
        let bound = REFUSALS_BEFORE_BACKOFF + 10_000 / STRIDE_MAX + 8;
        assert!(tries <= bound, "{tries} tries of 10000 pages, above {bound}");
        assert!(tries >= 10_000 / STRIDE_MAX, "{tries} tries: never fewer than one in the widest stride");
        // Passed over pages until the next try, then one kept: every page tried again.
        while !backoff.try_next() {}
        backoff.tried(true);
        assert!((0..100).all(|_| {
            let tried = backoff.try_next();
            backoff.tried(true);
            tried
        }));
    }

    /// Pieces of an append that split LBAs are kept as the LBAs the device wrote.
    #[test]
    fn pieces_that_split_lbas_are_kept_as_the_device_wrote_them() {
        let pool = CompressedPool::new(Arc::new(MemDevice::new(geometry()).unwrap()), COMPRESSED_POOL_MIN_BYTES);
        let whole = [page(4, true), page(5, true)].concat();
        let pieces = [IoSlice::new(&whole[..2048]), IoSlice::new(&whole[2048..6144]), IoSlice::new(&whole[6144..])];
        let first = pool.append_vectored(1, &pieces, None).unwrap();
        let mut back = vec![0u8; 4096];
        for (i, expected) in whole.chunks(4096).enumerate() {
            pool.read(first + i as u64, &mut back, None).unwrap();
            assert!(back == expected, "LBA {i} of the append");
        }
        assert_eq!(pool.stats().reads_served, 2, "served from the pool: {:?}", pool.stats());
    }

    /// A page that does not compress is refused; one that does is served, until its
    /// zone is reset; a read with metadata goes to the device.
    #[test]
    fn the_pool_keeps_what_compresses_and_forgets_a_reset_zone() {
        let pool = CompressedPool::new(Arc::new(MemDevice::new(geometry()).unwrap()), COMPRESSED_POOL_MIN_BYTES);
        let (kept, random) = (page(1, true), page(2, false));
        let first = pool.append(0, &[kept.clone(), random.clone()].concat(), None).unwrap();
        let stats = pool.stats();
        assert_eq!((stats.pages_stored, stats.pages_refused, stats.pages_held), (1, 1, 1), "{stats:?}");
        assert!(stats.ratio() > 2.0, "{stats:?}");
        let mut back = vec![0u8; 4096];
        pool.read(first, &mut back, None).unwrap();
        assert!(back == kept);
        assert_eq!(pool.stats().reads_served, 1);
        pool.read(first + 1, &mut back, None).unwrap();
        assert!(back == random);
        assert_eq!(pool.stats().reads_missed, 1, "the random page came from the device");
        pool.reset(0).unwrap();
        let again = pool.append(0, &page(3, true), None).unwrap();
        assert_eq!(again, first, "the zone starts over");
        pool.read(first, &mut back, None).unwrap();
        assert!(back == page(3, true), "the new page, not the one before the reset");
    }
}
