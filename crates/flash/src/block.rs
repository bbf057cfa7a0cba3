//! A conventional SSD shaped like the WD SN540: the same NAND as the ZNS model behind a
//! page-mapped FTL ([`crate::ftl`]) with over-provisioning, greedy (or FIFO) cleaning and
//! TRIM, in virtual time.
//!
//! What firmware does, and where the model takes it from:
//!
//! - Erase unit: a superblock, one erase block on every die, so that every write point
//!   stripes over all dies and the controller erases and allocates whole superblocks
//!   (Software-Enabled Flash API documentation, "Super Blocks": super blocks span all the
//!   dies and erase and allocation happen in units of them). Its size is the real drive's,
//!   about 1 GiB (the paper, §3.2: "1GiB-TRIMs (the size of an erase-block and a ZNS zone
//!   on our device)"; the NAND model's erase block is a ZN540 zone's 1077 MiB over 32
//!   dies). A scaled-down drive has fewer of them, not smaller ones, down to
//!   `BlockConfig::min_superblocks` (see [`BlockConfig`]).
//! - Placement: program unit `k` of superblock `s` lives on die `(k + s) % dies`, so each
//!   write point stripes its data over all dies, unit by unit.
//! - Host writes enter the write buffer (DRAM, power-loss protected) and complete there;
//!   each full program unit of the host write point is programmed at once and leaves the
//!   buffer when programmed.
//! - Host data and GC relocations go to separate open superblocks: relocated data has
//!   survived and is colder ("grouping by death time", He et al., "The Unwritten Contract
//!   of Solid State Drives", EuroSys 2017).
//! - Victims: greedy over closed superblocks (fewest valid pages), optimal for memoryless
//!   workloads (Yang, Misra, Rubenstein, "On the Optimality of Greedy Garbage Collection
//!   for SSDs", SIGMETRICS PER 43(2), 2015) and modelled by Desnoyers (ACM TOS 10(2),
//!   2014); FIFO as the alternative.
//! - Foreground GC: while fewer than `gc_foreground_free_superblocks` are free, every host
//!   page pays for `v / (P - v)` page copies of the current victim (v valid of P pages),
//!   so free space stays level and host writes slow down to what the dies can clean.
//!   Below two free superblocks, host writes wait for whole steps of cleaning.
//! - Background GC: while fewer than `gc_background_free_superblocks` are free, the idle
//!   time before each command is spent cleaning (as much as the dies could copy in it).
//! - GC copies take die time (page read, then a program at the GC write point) and so
//!   delay host programs and reads on the same dies; an erase takes every die of the
//!   superblock for tBERS.
//! - TRIM (NVMe Dataset Management, deallocate) unmaps at the L2P granularity, 4 KiB, at
//!   once (trimmed pages are never copied) and occupies the controller for a fixed time
//!   per command plus a little per page, which every later command waits behind.

use serde::{Deserialize, Serialize};
use znswap_core::PAGE_BYTES;

use crate::buffer::WriteBuffer;
use crate::counters::MediaCounters;
pub use crate::ftl::Victim;
use crate::ftl::{Ftl, GcStep, Stream};
use crate::nand::{Nand, NandConfig, NandConfigError};
use crate::Ns;

/// The fewest superblocks a block SSD may have at all: the free reserve, two open write
/// points and a victim must leave greedy cleaning a choice of closed superblocks.
pub const SUPERBLOCKS_MIN: u32 = 16;

/// Superblocks that must stay out of the data's way besides the foreground reserve of
/// free ones: the two open write points (host and GC) and the victim being cleaned.
pub const RESERVE_BEYOND_FOREGROUND: u32 = 3;

/// Shape and policies of a block SSD. `Default`: 16 GiB logical, 7 % over-provisioning,
/// superblocks of the real drive's size (one full-size erase block on every die: 1077 MiB)
/// while at least 64 of them hold the data, greedy cleaning, background GC below 4 free
/// superblocks, foreground below 3, 4 µs per TRIM command.
///
/// Geometry when sizes are derived (`superblock_pages = 0`, `superblocks = 0`):
///
/// - The erase unit is a superblock, one erase block on every die, as firmware forms it
///   to stripe writes over all dies (Software-Enabled Flash API, "Super Blocks": super
///   blocks span all the dies and are the unit of erase and allocation). Its real size
///   is `nand.erase_block_bytes × dies`; the paper itself names 1 GiB as the erase block
///   of its drives (§3.2, Fig. 6) and the ZN540's zone capacity, 1077 MiB, is what the
///   NAND model's erase block is taken from.
/// - A scaled-down drive keeps that size and has fewer superblocks (scaling their count,
///   not their share of the drive), so a 512-slot swap cluster stays 1/538 of one. Only
///   when fewer than `min_superblocks` would hold the data (or the real-size ones would
///   leave no room for the reserve) do superblocks shrink, to whole stripes giving
///   `min_superblocks` or one more: the compromise `crates/flash/README.md` measures.
/// - Cleaning thresholds count superblocks as firmware does; the background one is one
///   superblock above the foreground one, since on a drive of a few dozen superblocks a
///   wider gap would have idle-time cleaning compact most of the spare space.
/// - What cleaning keeps out of play is added on top of `logical × (1 + over_provisioning)`:
///   `gc_foreground_free_superblocks` superblocks, the mean of the free superblocks
///   (paced cleaning holds them just under the threshold) and the unwritten halves of the
///   two open write points. On the real drive this is a few of ~1000 superblocks, a
///   negligible share of the spare space; on a scaled-down drive with few superblocks it
///   would otherwise take much of it. With it, uniform random writes keep their WAF
///   within 4 % from 64 superblocks up (`examples/superblock_floor.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BlockConfig {
    /// Logical pages (4 KiB) the host may address.
    pub logical_pages: u64,
    /// Spare space: superblocks holding `logical × (1 + over_provisioning)`, rounded up,
    /// plus what cleaning keeps out of play (see above).
    pub over_provisioning: f64,
    /// Pages per superblock, a multiple of the stripe (program unit pages × dies);
    /// 0 derives it (see above).
    pub superblock_pages: u32,
    /// Exact number of superblocks (reserve included); 0 derives it.
    pub superblocks: u32,
    /// Derived geometry keeps the real superblock size while at least this many
    /// superblocks hold the data and spare space; below, superblocks shrink.
    pub min_superblocks: u32,
    /// Background GC runs in idle time while fewer superblocks than this are free.
    pub gc_background_free_superblocks: u32,
    /// Host writes pace GC copies while fewer superblocks than this are free (>= 2).
    pub gc_foreground_free_superblocks: u32,
    pub victim: Victim,
    /// Controller time of one TRIM command (one range).
    pub t_trim_command_ns: Ns,
    /// Controller time per page of a TRIM range (mapping updates).
    pub t_trim_page_ns: Ns,
    pub nand: NandConfig,
}

impl Default for BlockConfig {
    fn default() -> BlockConfig {
        BlockConfig {
            logical_pages: 4 << 20,
            over_provisioning: 0.07,
            superblock_pages: 0,
            superblocks: 0,
            min_superblocks: 64,
            gc_background_free_superblocks: 4,
            gc_foreground_free_superblocks: 3,
            victim: Victim::Greedy,
            t_trim_command_ns: 4_000,
            t_trim_page_ns: 5,
            nand: NandConfig::default(),
        }
    }
}

impl BlockConfig {
    /// The default device with `logical_bytes` of logical space (rounded down to pages).
    pub fn with_capacity_bytes(logical_bytes: u64) -> BlockConfig {
        BlockConfig { logical_pages: logical_bytes / PAGE_BYTES as u64, ..BlockConfig::default() }
    }

    /// Pages of the real drive's superblock: one full-size erase block on every die,
    /// rounded down to whole stripes (0 when `nand.erase_block_bytes` is 0).
    pub fn full_superblock_pages(&self) -> u64 {
        let stripe = self.nand.stripe_pages() as u64;
        let pages = self.nand.erase_block_bytes * self.nand.dies() as u64 / PAGE_BYTES as u64;
        pages / stripe * stripe
    }

    /// Superblock count and pages per superblock; the error names the problem and the fix.
    pub fn layout(&self) -> Result<(u32, u32), BlockConfigError> {
        self.nand.validate()?;
        if self.logical_pages == 0 {
            return Err(BlockConfigError::NoLogicalPages);
        }
        let stripe = self.nand.stripe_pages();
        if self.superblock_pages % stripe != 0 {
            return Err(BlockConfigError::SuperblockNotStripe {
                superblock_pages: self.superblock_pages,
                stripe_pages: stripe,
                program_unit_pages: self.nand.program_unit_pages(),
                dies: self.nand.dies(),
            });
        }
        if self.superblocks == 0 && !(self.over_provisioning.is_finite() && self.over_provisioning > 0.0) {
            return Err(BlockConfigError::OverProvisioning { over_provisioning: self.over_provisioning });
        }
        let foreground = self.gc_foreground_free_superblocks;
        if foreground < 2 {
            return Err(BlockConfigError::ForegroundReserve { foreground });
        }
        if self.gc_background_free_superblocks < foreground {
            return Err(BlockConfigError::BackgroundReserve {
                background: self.gc_background_free_superblocks,
                foreground,
            });
        }
        let reserve = (foreground + RESERVE_BEYOND_FOREGROUND) as u64;
        // Added on top of the spare space: what foreground-paced cleaning keeps out of
        // play on average (free superblocks just under the threshold, and the unwritten
        // halves of the two open write points; see `BlockConfig`).
        let on_top = foreground as u64;
        let physical_wanted = (self.logical_pages as f64 * (1.0 + self.over_provisioning)).ceil() as u64;
        let pages_per_superblock = if self.superblock_pages != 0 {
            self.superblock_pages as u64
        } else if self.superblocks != 0 {
            let data = (self.superblocks as u64).saturating_sub(on_top).max(1);
            (physical_wanted / data / stripe as u64).max(1) * stripe as u64
        } else {
            let full = self.full_superblock_pages();
            let floor = self.min_superblocks.max(1) as u64;
            let data = if full > 0 { physical_wanted.div_ceil(full) } else { 0 };
            // The real size only where it leaves `floor` superblocks and the logical space
            // fits beside the reserve (few real-size superblocks may not).
            if full > 0 && data >= floor && (data + on_top).saturating_sub(reserve) * full > self.logical_pages {
                full
            } else {
                (physical_wanted / floor / stripe as u64).max(1) * stripe as u64
            }
        };
        let superblocks = if self.superblocks != 0 {
            self.superblocks as u64
        } else {
            physical_wanted.div_ceil(pages_per_superblock) + on_top
        };
        if superblocks < SUPERBLOCKS_MIN as u64 {
            return Err(BlockConfigError::TooFewSuperblocks { superblocks, pages_per_superblock });
        }
        if superblocks * pages_per_superblock >= u32::MAX as u64 {
            return Err(BlockConfigError::TooManyPages);
        }
        // Free reserve + two open write points + the victim must still leave room for
        // every logical page, or cleaning could find nothing to reclaim.
        let usable = (superblocks - reserve) * pages_per_superblock;
        if usable <= self.logical_pages {
            return Err(BlockConfigError::LogicalDoesNotFit {
                logical_pages: self.logical_pages,
                usable_pages: usable,
            });
        }
        Ok((superblocks as u32, pages_per_superblock as u32))
    }
}

/// A block SSD configuration that cannot work: each names the problem and the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockConfigError {
    #[error(transparent)]
    Nand(#[from] NandConfigError),
    #[error("block: logical_pages must be at least 1")]
    NoLogicalPages,
    #[error(
        "block: superblock_pages = {superblock_pages} must be a multiple of the stripe ({stripe_pages} pages: \
         {program_unit_pages} pages per program unit × {dies} dies), since a superblock is one block on every die"
    )]
    SuperblockNotStripe { superblock_pages: u32, stripe_pages: u32, program_unit_pages: u32, dies: u32 },
    #[error("block: over_provisioning = {over_provisioning} must be a positive fraction")]
    OverProvisioning { over_provisioning: f64 },
    #[error(
        "block: {superblocks} superblocks of {pages_per_superblock} pages; at least {minimum} are needed: raise \
         logical_pages, lower superblock_pages, or use fewer dies / smaller program units",
        minimum = SUPERBLOCKS_MIN
    )]
    TooFewSuperblocks { superblocks: u64, pages_per_superblock: u64 },
    #[error("block: more than 2^32 physical pages; the maps use u32 page numbers")]
    TooManyPages,
    #[error("block: gc_foreground_free_superblocks = {foreground} must be at least 2 (host and GC write points)")]
    ForegroundReserve { foreground: u32 },
    #[error(
        "block: gc_background_free_superblocks = {background} must be at least gc_foreground_free_superblocks \
         ({foreground})"
    )]
    BackgroundReserve { background: u32, foreground: u32 },
    #[error(
        "block: {logical_pages} logical pages do not fit the {usable_pages} pages left after the GC reserve; raise \
         over_provisioning (or superblocks)"
    )]
    LogicalDoesNotFit { logical_pages: u64, usable_pages: u64 },
}

/// A GC read not yet issued: consecutive copies out of one program unit share one array read.
#[derive(Clone, Copy, Debug)]
struct PendingRead {
    unit: u32,
    die: u32,
    pages: u32,
    earliest: Ns,
}

/// An SN540-like block SSD in virtual time.
#[derive(Clone, Debug)]
pub struct BlockSsd {
    config: BlockConfig,
    ftl: Ftl,
    nand: Nand,
    buffer: WriteBuffer,
    counters: MediaCounters,
    clock: Ns,
    controller_free: Ns,
    unit_pages: u32,
    pages_per_superblock: u32,
    dies: u32,
    /// When each superblock's last erase ends: nothing may be programmed there earlier.
    erased_at: Vec<Ns>,
    /// Latest arrival in the buffer of the host write point's open program unit.
    host_unit_ready: Ns,
    /// Latest read of data for the GC write point's open program unit.
    gc_unit_ready: Ns,
    gc_read: Option<PendingRead>,
    /// Latest read out of the current victim: its erase comes after.
    victim_reads_done: Ns,
    /// Foreground pacing: copies owed, and copies per host page for the current victim.
    gc_credit: f64,
    gc_copies_per_host_page: f64,
    /// Device-wide time one GC copy costs when spread over all dies (background budget).
    gc_copy_ns: Ns,
}

impl BlockSsd {
    pub fn new(config: BlockConfig) -> Result<BlockSsd, BlockConfigError> {
        let (superblocks, pages_per_superblock) = config.layout()?;
        let nand = config.nand;
        let unit_pages = nand.program_unit_pages();
        let die_time_per_copy =
            nand.t_read_ns + nand.transfer_ns(PAGE_BYTES as u64) + nand.t_prog_ns / unit_pages as Ns;
        Ok(BlockSsd {
            config,
            ftl: Ftl::new(config.logical_pages, superblocks, pages_per_superblock, config.victim),
            nand: Nand::new(nand),
            buffer: WriteBuffer::new(nand.write_buffer_bytes),
            counters: MediaCounters::default(),
            clock: 0,
            controller_free: 0,
            unit_pages,
            pages_per_superblock,
            dies: nand.dies(),
            erased_at: vec![0; superblocks as usize],
            host_unit_ready: 0,
            gc_unit_ready: 0,
            gc_read: None,
            victim_reads_done: 0,
            gc_credit: 0.0,
            gc_copies_per_host_page: 0.0,
            gc_copy_ns: (die_time_per_copy / nand.dies() as Ns).max(1),
        })
    }

    pub fn config(&self) -> &BlockConfig {
        &self.config
    }

    pub fn logical_pages(&self) -> u64 {
        self.ftl.logical_pages()
    }

    pub fn physical_pages(&self) -> u64 {
        self.ftl.superblocks() as u64 * self.pages_per_superblock as u64
    }

    pub fn superblocks(&self) -> u32 {
        self.ftl.superblocks()
    }

    pub fn superblock_pages(&self) -> u32 {
        self.pages_per_superblock
    }

    pub fn free_superblocks(&self) -> u32 {
        self.ftl.free_superblocks()
    }

    /// Logical pages holding data (written and not trimmed).
    pub fn live_pages(&self) -> u64 {
        self.ftl.live_pages()
    }

    /// Physical pages out of play: free superblocks and the unwritten rest of the open
    /// write points. Physical minus this is the space cleaning actually works with.
    pub fn reserved_pages(&self) -> u64 {
        self.ftl.reserved_pages()
    }

    pub fn counters(&self) -> MediaCounters {
        self.counters
    }

    /// Die time used so far, summed over all dies: divided by dies × elapsed time, the
    /// NAND's utilization.
    pub fn die_busy_ns(&self) -> Ns {
        self.nand.die_busy_ns()
    }

    /// Recomputes the FTL's maps and counts from scratch; panics if anything drifted.
    pub fn check_invariants(&self) {
        self.ftl.check_invariants();
        assert_eq!(
            self.counters.media_pages_written,
            self.counters.host_pages_written + self.counters.gc_pages_copied,
            "media pages are host pages plus GC copies"
        );
    }

    /// Writes `pages` logical pages from `lpn`; completes when the last is in the buffer.
    pub fn write(&mut self, now: Ns, lpn: u64, pages: u32) -> Ns {
        self.check_range("write", lpn, pages);
        let start = self.advance(now).max(self.controller_free);
        let mut in_buffer = start;
        for page in 0..pages as u64 {
            self.foreground_gc(start);
            in_buffer = self.write_page(start, lpn + page);
        }
        in_buffer + self.nand.config.t_command_ns
    }

    /// Reads `pages` logical pages from `lpn`. Unmapped pages read as zeroes without media
    /// access; pages still in the write buffer come from there.
    pub fn read(&mut self, now: Ns, lpn: u64, pages: u32) -> Ns {
        self.check_range("read", lpn, pages);
        let start = self.advance(now).max(self.controller_free);
        let mut done = start;
        let mut group: Option<PendingRead> = None;
        for page in 0..pages as u64 {
            let Some(ppn) = self.ftl.lookup(lpn + page) else { continue };
            if self.in_write_buffer(ppn) {
                continue;
            }
            let unit = ppn / self.unit_pages;
            match &mut group {
                Some(g) if g.unit == unit => g.pages += 1,
                _ => {
                    if let Some(g) = group.take() {
                        done = done.max(self.nand.read(start, g.die, g.pages));
                    }
                    group = Some(PendingRead { unit, die: self.die_of(ppn), pages: 1, earliest: start });
                }
            }
        }
        if let Some(g) = group {
            done = done.max(self.nand.read(g.earliest, g.die, g.pages));
        }
        self.counters.pages_read += pages as u64;
        done + self.nand.config.t_command_ns
    }

    /// Deallocates `pages` logical pages from `lpn`: mapped pages become invalid at once.
    /// Costs controller time that every later command waits behind.
    pub fn trim(&mut self, now: Ns, lpn: u64, pages: u32) -> Ns {
        self.check_range("trim", lpn, pages);
        let start = self.advance(now).max(self.controller_free);
        for page in 0..pages as u64 {
            if self.ftl.trim(lpn + page) {
                self.counters.trims_pages += 1;
            }
        }
        self.counters.trim_commands += 1;
        self.controller_free = start + self.config.t_trim_command_ns + self.config.t_trim_page_ns * pages as Ns;
        self.controller_free + self.nand.config.t_command_ns
    }

    /// Bytes of a superblock's block on one die.
    pub fn block_bytes_per_die(&self) -> u64 {
        self.pages_per_superblock as u64 / self.dies as u64 * PAGE_BYTES as u64
    }

    fn check_range(&self, what: &str, lpn: u64, pages: u32) {
        let end = lpn + pages as u64;
        assert!(
            pages > 0 && end <= self.logical_pages(),
            "{what} of pages {lpn}..{end} is empty or past the end of the device ({} logical pages)",
            self.logical_pages()
        );
    }

    /// Moves the clock to `now`, spending the idle time since the device went quiet on
    /// background cleaning first.
    fn advance(&mut self, now: Ns) -> Ns {
        let now = now.max(self.clock);
        let idle_from = self.nand.busy_until().max(self.clock);
        if idle_from < now {
            self.background_gc(idle_from, now);
        }
        self.clock = now;
        self.nand.prune(now);
        now
    }

    fn background_gc(&mut self, idle_from: Ns, now: Ns) {
        let mut budget_ns = now - idle_from;
        while self.ftl.free_superblocks() < self.config.gc_background_free_superblocks {
            let cost = match self.gc_step(idle_from) {
                GcStep::Copied { .. } => self.gc_copy_ns,
                GcStep::Erased { .. } => self.nand.config.erase_ns(self.block_bytes_per_die()),
                GcStep::Idle => break,
            };
            if cost >= budget_ns {
                break;
            }
            budget_ns -= cost;
        }
    }

    fn foreground_gc(&mut self, at: Ns) {
        if self.ftl.free_superblocks() < self.config.gc_foreground_free_superblocks {
            if self.ensure_victim() {
                self.gc_credit += self.gc_copies_per_host_page;
                while self.gc_credit >= 1.0 && self.ftl.has_victim() {
                    if let GcStep::Copied { .. } = self.gc_step(at) {
                        self.gc_credit -= 1.0;
                    }
                }
                if !self.ftl.has_victim() {
                    // Credit was sized for the victim just freed; the next gets its own.
                    self.gc_credit = 0.0;
                }
                // A victim with nothing left to copy is erased now, not a page later.
                if self.ftl.victim_valid_pages() == Some(0) {
                    while self.ftl.has_victim() {
                        self.gc_step(at);
                    }
                }
            }
        } else {
            self.gc_credit = 0.0;
        }
        // The host write point may take a free superblock only if one stays for the GC.
        let mut steps = 0u64;
        while self.ftl.host_needs_superblock() && self.ftl.free_superblocks() < 2 {
            steps += 1;
            if self.gc_step(at) == GcStep::Idle || steps > self.physical_pages() {
                panic!("block SSD full: cleaning frees nothing; the configuration needs more over-provisioning");
            }
        }
    }

    fn write_page(&mut self, at: Ns, lpn: u64) -> Ns {
        let in_buffer = self.buffer.admit(at, PAGE_BYTES as u64);
        let ppn = self.ftl.host_write(lpn);
        self.counters.host_pages_written += 1;
        self.counters.media_pages_written += 1;
        self.host_unit_ready = self.host_unit_ready.max(in_buffer);
        if (ppn + 1) % self.unit_pages == 0 {
            let end = self.program_unit(self.host_unit_ready, ppn);
            self.buffer.release_at(end, self.nand.config.program_unit_bytes as u64);
            self.host_unit_ready = 0;
        }
        in_buffer
    }

    /// Makes sure a victim is being cleaned, choosing one (and its pacing) if needed.
    /// False when no superblock is worth cleaning.
    fn ensure_victim(&mut self) -> bool {
        if self.ftl.has_victim() {
            return true;
        }
        let Some(valid) = self.ftl.choose_victim() else { return false };
        self.counters.gc_victims += 1;
        // Copies per host page that keep free space level while this victim is cleaned.
        // A FIFO victim may be entirely valid: then it is copied in one go.
        let freed = (self.pages_per_superblock - valid).max(1) as f64;
        self.gc_copies_per_host_page = valid as f64 / freed;
        true
    }

    /// One cleaning step issued at `at`, with its die time.
    fn gc_step(&mut self, at: Ns) -> GcStep {
        if !self.ensure_victim() {
            return GcStep::Idle;
        }
        let step = self.ftl.gc_step();
        match step {
            GcStep::Copied { from, to } => {
                self.counters.gc_pages_copied += 1;
                self.counters.media_pages_written += 1;
                self.gc_read_page(at, from);
                if (to + 1) % self.unit_pages == 0 {
                    self.flush_gc_read();
                    self.program_unit(self.gc_unit_ready, to);
                    self.gc_unit_ready = 0;
                }
            }
            GcStep::Erased { superblock } => {
                self.flush_gc_read();
                let earliest = at.max(self.victim_reads_done);
                let mut done = earliest;
                let block_bytes = self.block_bytes_per_die();
                for die in 0..self.dies {
                    done = done.max(self.nand.erase(earliest, die, block_bytes));
                }
                self.erased_at[superblock as usize] = done;
                self.counters.erases += self.dies as u64;
                self.victim_reads_done = 0;
            }
            GcStep::Idle => {}
        }
        step
    }

    fn gc_read_page(&mut self, at: Ns, ppn: u32) {
        let unit = ppn / self.unit_pages;
        match &mut self.gc_read {
            Some(pending) if pending.unit == unit => pending.pages += 1,
            _ => {
                self.flush_gc_read();
                self.gc_read = Some(PendingRead { unit, die: self.die_of(ppn), pages: 1, earliest: at });
            }
        }
    }

    fn flush_gc_read(&mut self) {
        if let Some(pending) = self.gc_read.take() {
            let done = self.nand.read(pending.earliest, pending.die, pending.pages);
            self.gc_unit_ready = self.gc_unit_ready.max(done);
            self.victim_reads_done = self.victim_reads_done.max(done);
        }
    }

    /// Programs the full program unit ending at physical page `last_ppn`.
    fn program_unit(&mut self, ready: Ns, last_ppn: u32) -> Ns {
        let superblock = last_ppn / self.pages_per_superblock;
        let die = self.die_of(last_ppn);
        self.nand.program(ready, self.erased_at[superblock as usize], die, self.unit_pages)
    }

    fn die_of(&self, ppn: u32) -> u32 {
        let superblock = ppn / self.pages_per_superblock;
        let unit = (ppn % self.pages_per_superblock) / self.unit_pages;
        (unit + superblock) % self.dies
    }

    /// Pages of a write point's unprogrammed program unit are still in a buffer.
    fn in_write_buffer(&self, ppn: u32) -> bool {
        [Stream::Host, Stream::Gc].into_iter().any(|stream| {
            self.ftl.write_point(stream).is_some_and(|point| {
                let start = point.superblock * self.pages_per_superblock;
                let programmed = point.next_page / self.unit_pages * self.unit_pages;
                ppn >= start + programmed && ppn < start + point.next_page
            })
        })
    }
}
