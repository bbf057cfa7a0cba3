//! The one small interface between the virtual host and a swap system.
//!
//! The host calls the back end with an [`Io`] context at the current virtual time. A
//! back end never blocks and never owns the clock: it submits commands to its device
//! model (which answers with completion times at once), asks the host to call
//! [`Backend::complete`] with a token at those times, and reports what the host must
//! know as [`Notice`]s. Kernel CPU work that is not on an application thread (host GC,
//! TRIM dispatch) is reported as [`Io::kernel_work`] and runs on the simulated cores.

use serde::Serialize;

use crate::events::Ns;

/// A page of the host: an index into its page table.
pub type PageId = u32;

/// Kernel threads whose CPU time the host schedules on its cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelThread {
    /// ZNGC (`kznsd`).
    Gc = 0,
    /// The discard (TRIM) worker.
    Discard = 1,
}

pub const KERNEL_THREADS: usize = 2;

/// The host side of a back-end call.
pub struct Io {
    pub now: Ns,
    /// `(time, token)`: call `complete(token)` at `time`.
    pub completions: Vec<(Ns, u64)>,
    pub notices: Vec<Notice>,
    /// CPU ns owed per kernel thread, drained by the host.
    pub kernel_ns: [Ns; KERNEL_THREADS],
    /// Host GC CPU ns owed per tenant (for accounting, not scheduling).
    pub tenant_gc_ns: Vec<Ns>,
}

impl Io {
    pub fn new(tenants: usize) -> Io {
        Io {
            now: 0,
            completions: Vec::with_capacity(256),
            notices: Vec::with_capacity(256),
            kernel_ns: [0; KERNEL_THREADS],
            tenant_gc_ns: vec![0; tenants],
        }
    }

    pub fn complete_at(&mut self, at: Ns, token: u64) {
        self.completions.push((at.max(self.now), token));
    }

    pub fn notify(&mut self, notice: Notice) {
        self.notices.push(notice);
    }

    pub fn kernel_work(&mut self, thread: KernelThread, ns: Ns) {
        self.kernel_ns[thread as usize] += ns;
    }
}

/// What a back end tells the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The swap-out of `page` is over. `swapped`: its data is on swap and the frame can
    /// go; otherwise the page stays resident (written to during the write, or the write
    /// failed). `written`: a device write happened (false for a clean swap cache hit).
    SwapOutDone { page: PageId, swapped: bool, written: bool },
    /// A read of `page` completed with the data version found on the device. `cached`:
    /// its slot stays allocated (the page is clean on swap until written).
    SwapInDone { page: PageId, version: u32, cached: bool },
    /// The back end refused swap-outs earlier (backpressure) and can take them again.
    Ready,
}

/// Answer to [`Backend::swap_out`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapOutStart {
    /// Under way; a `SwapOutDone` notice follows (maybe within this very call).
    Started,
    /// No room now (GC behind, swap full): keep the page resident and retry later.
    Busy,
}

/// Counters every back end keeps; all monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct BackendCounters {
    /// Pages the swap system wrote for swap-out (not GC copies).
    pub swap_out_pages_written: u64,
    /// Pages read for swap-in (demand and readahead), not GC reads.
    pub swap_in_pages_read: u64,
    /// NAND pages programmed, everything included (device GC, host GC copies).
    pub media_pages_written: u64,
    /// Pages the device counts as written by its host (on ZNS this includes ZNGC's
    /// appends): `media / device_host` is the device's own amplification.
    pub device_host_pages_written: u64,
    /// Pages copied by a host-side GC (ZNGC); 0 on a block SSD, whose GC is inside.
    pub host_gc_pages_written: u64,
    pub host_gc_pages_read: u64,
    /// Victim zones collected by ZNGC.
    pub host_gc_victims: u64,
    pub trim_commands: u64,
    pub trim_pages: u64,
    pub erases: u64,
    /// Slots holding data (swapped-out and swap-cached pages).
    pub slots_used: u64,
    /// Pages the device itself holds as live (a block SSD: every LBA written and never
    /// trimmed; ZNS: what the host's slot map says is valid).
    pub device_live_pages: u64,
    /// Data slots the swap system offers (utilization = used / capacity).
    pub slots_capacity: u64,
    /// Swap-ins whose data came back wrong (checked by the back end's own oracle where
    /// it keeps one; the host checks every page too).
    pub records_rejected: u64,
}

/// A swap system on a device model.
pub trait Backend {
    fn name(&self) -> String;

    /// Starts writing out resident `page`, holding data `version`, from `cpu`.
    fn swap_out(&mut self, io: &mut Io, cpu: u32, page: PageId, version: u32) -> SwapOutStart;

    /// Sends what the swap-outs since the last flush queued (merged writes).
    fn flush(&mut self, io: &mut Io);

    /// Starts reading non-resident `page` (swapped out earlier). Pages worth reading
    /// ahead go to `readahead`; the host reserves frames and calls `read_ahead` for
    /// those it can take.
    fn swap_in(&mut self, io: &mut Io, cpu: u32, page: PageId, readahead: &mut Vec<PageId>);

    /// Reads `page` ahead into the swap cache (a frame is reserved for it).
    fn read_ahead(&mut self, io: &mut Io, page: PageId);

    /// A fault found a page readahead had brought in (`swapin_readahead_hits`).
    fn readahead_hit(&mut self) {}

    /// First write to a page since its swap-in or since its swap-out started.
    fn dirtied(&mut self, io: &mut Io, page: PageId);

    /// The page was freed (its region unmapped).
    fn free(&mut self, io: &mut Io, page: PageId);

    /// A completion the back end asked for with `Io::complete_at`.
    fn complete(&mut self, io: &mut Io, token: u64);

    /// Periodic work (timers, accounting); about every millisecond.
    fn tick(&mut self, io: &mut Io);

    fn counters(&self) -> BackendCounters;

    /// Host GC bytes moved on behalf of each tenant (empty when not applicable).
    fn tenant_gc_bytes(&self) -> Vec<u64> {
        Vec::new()
    }

    /// End-of-run checks (engine invariants); returns violations.
    fn check(&mut self) -> Vec<String> {
        Vec::new()
    }
}
