//! znswap's live pager as a sans-I/O state machine: every decision the pager makes
//! (which fault does what, which pages to evict, when a page may be discarded, which
//! thread to wake), with no threads, no system calls, no clock and no page bytes.
//!
//! The shell (`znswap-pager`) runs threads around one [`PagerCore`] behind a mutex and
//! carries out what it asks; the pager DST (`znswap-dst`) drives the same core with
//! seeded interleavings of application threads, handler threads, the evictor and the
//! I/O thread over a model of the page tables and the device. Page states and their
//! transitions are drawn in this crate's README.
//!
//! # Actors
//! The three loops that drive the core (the evictor, a fault's resolution, the I/O
//! thread) are written once, here, as step functions ([`Evictor`], [`FaultTask`],
//! [`IoThread`]) over a [`Shell`] that holds the locks and does the work outside them.
//! The live pager's threads call them in a loop; the pager DST calls the same steps in
//! the order its seed picks. The calling order below is what those steps follow.
//!
//! # Calling order
//! Every call is made holding the pager's lock, with `now` in nanoseconds; the
//! [`Action`]s a call leaves are carried out before the lock is released. Between
//! calls, work that must not hold the lock (device I/O, write-protection of victims,
//! reading victims, discards) runs outside it, on what the last call handed out.
//! - **Regions**: [`PagerCore::region_add`] once the range is registered with
//!   userfaultfd; [`PagerCore::region_remove`] before it is unregistered and unmapped.
//! - **A fault** ([`Fault`]): [`PagerCore::fault`] until it answers `Done` or
//!   `NotOurs`. `Again` asks for a pause, `WaitRoom` for room under the budget (a
//!   discard, or a wait for `Wakeups::room`), `Read` for a device read outside the lock
//!   followed by [`PagerCore::fault_read_done`], `ZeroFill` (in regions the program
//!   discarded from) for a zero page mapped under the lock only where nothing is,
//!   followed by [`PagerCore::fault_zero_filled`].
//! - **The program's own memory calls**: a userfaultfd REMOVE event (a discard):
//!   [`PagerCore::discard_range`] in the lock hold that read the event. A fork:
//!   [`PagerCore::fork_hold`] under the lock held across `fork`, [`PagerCore::child_page`]
//!   on the child's copy, [`PagerCore::fork_release`] once the child is gone.
//! - **The evictor**: [`PagerCore::evictor_work`] says whether to discard, evict or
//!   sleep. Discard: [`PagerCore::discard_take`], `MADV_DONTNEED` of the batch's ranges
//!   outside the lock, [`PagerCore::discard_done`]. Evict: [`PagerCore::evict_pick`],
//!   then outside the lock move each victim to park, write-protect the round's ranges
//!   and look for all-zero victims, then [`PagerCore::evict_hand_over`]; `mappings` is held from the pick to
//!   the hand-over (a victim's region stays mapped), and one round is in flight at a
//!   time.
//! - **The I/O thread**: [`PagerCore::io_next`] gives the engine's next request with
//!   the source of every page an append writes; the shell runs it outside the lock and
//!   reports it with [`PagerCore::io_done`].
//! - After every call: [`PagerCore::take_wakeups`].
//!
//! # Locks, and the rule self-paging rests on
//! Every lock of the pager (`znswap-pager`) and of `znswap run`'s preload library
//! (`znswap-preload`), in the order they are taken: a thread holding one takes only
//! those below it. Extend this table with any new lock.
//!
//! | lock | where | held across | checked |
//! |---|---|---|---|
//! | mapping table (`MAPPING_TABLE`) | preload `mapping.rs` | heap allocation, touches of paged memory (faults, served by handler threads), `program_discard`, `fork` | never taken by a pager thread (aborts) |
//! | `forks` | pager `program.rs` | nothing (taken alone) | |
//! | direct-reclaim batch (`fault_discard`) | pager, faults | nothing: taken out (only tried under the state lock) and put back | |
//! | read-ahead buffer | pager, faults | a fault's read and its install (only tried, never waited for) | |
//! | `mappings` (regions stay mapped) | pager | evictor rounds, appends reading victims, discards; exclusive while a region is unmapped | taken before the state lock (`Shell::mappings_read` asserts) |
//! | `device_gate` | pager | every device command (shared), `fork` (exclusive) | |
//! | state lock (this core) | pager | calls into the core and the actions they return; never a device command or a touch of region memory | device commands and region reads assert they are outside it |
//! | `CLAIM`, `INSTALL` | pager `lost_pages.rs`, `self_paging.rs` | nothing (leaves) | |
//! | carved blocks (`CARVED`) | preload `alloc.rs` | nothing but allocations from the default heap (a leaf; held across `fork` with the mapping table) | |
//!
//! In self-paging mode a fault is resolved in the faulting thread's SIGBUS handler,
//! which takes the state lock. That is sound only because **no pager code touches
//! region memory while holding the state lock**: the interrupted thread can never hold
//! it. The core never touches memory at all; its actions go through the kernel
//! (`UFFDIO_*`), which reports a missing page as an error rather than faulting, and the
//! shell checks the rule where it can (a thread-local flag asserted by the code that
//! reads region memory and by the SIGBUS handler).

// `is_multiple_of` is newer than the workspace's rust-version.
#![allow(clippy::manual_is_multiple_of)]
#![forbid(unsafe_code)]

mod action;
mod actor;
mod discard;
mod evict;
mod fault;
mod io;
mod notice;
mod out;
mod page;
mod park;
mod program;
mod readahead;
mod refault;
mod region;
mod sampling;
mod stats;
mod swap_cache;
mod tenant;
mod write_limit;

pub use action::{Action, Actions, CopyFrom, Wakeups};
pub use actor::{Evictor, EvictorDid, EvictorShell, FaultShell, FaultTask, IoShell, IoThread, Next, Shell, WaitOn};
pub use discard::{AddressRange, DiscardBatch, DropDelay};
pub use evict::{
    park_outcome, unpark_next, EvictRound, EvictorWork, MoveFailure, ParkOutcome, ProtectRange, ScanSpan, UnparkNext,
};
pub use fault::{Fault, FaultKind, FaultStep, Pause, ReadInto, ROOM_WAIT_MAX_NS, ZERO_FILL_AROUND_PAGES};
pub use io::{IoCompletion, IoPlan, PageSource};
pub use notice::Notice;
pub use page::PageState;
pub use program::{ChildPage, ForkHold};
pub use stats::CoreStats;
pub use tenant::TenantFigures;
pub use write_limit::WRITE_HOLD_MAX_NS;

use serde::{Deserialize, Serialize};
use znswap_core::{Config, ConfigError, Engine, Geometry, OwnerError, PolicyKind, RecordEncoding};

use action::Threads;
use discard::Drops;
use evict::Rounds;
use notice::Notices;
use out::OutPages;
use readahead::ReadaheadCache;
use region::Region;
use tenant::Tenants;

pub use znswap_core::PAGE_BYTES;
/// Largest read-ahead window, in pages.
pub const READAHEAD_PAGES_MAX: u32 = 32;
/// The read-ahead window's default bound, Linux's (`page-cluster` 3): where pages come
/// back as they went out together (Python building a dict), 8 gains most of what 32
/// does, and on random access it reads no more than none (the window stays at one page
/// without hits; figures: docs/measurements/2026-11-pager.md).
pub const READAHEAD_PAGES_DEFAULT: u32 = 8;
/// The most revolutions between two looks of reference sampling at a page
/// (`CoreConfig::sampling_period_max`) unless told otherwise, and the most allowed: a
/// page the program stopped writing stays up to that many revolutions more.
pub const SAMPLING_PERIOD_MAX_DEFAULT: u32 = 8;
pub const SAMPLING_PERIOD_MAX: u32 = 64;
/// Pages the GC moves per batch unless told otherwise (4 MiB; the engine's default).
pub const GC_BATCH_PAGES_DEFAULT: u32 = 1024;

/// A sealed (encrypted) page's nonce and tag, opaque here: the shell seals a page as
/// its append writes it and opens it after a read (`znswap-seal`); the core keeps each
/// swapped page's seal beside its state and hands it to the read.
pub type Seal = [u8; SEAL_BYTES];
pub const SEAL_BYTES: usize = 24;

/// A 128-bit digest of a page's bytes, opaque here (the shell's keyed hash; 0 for none):
/// with asynchronous write protection it tells whether a swap-cached page still holds
/// what its slot holds (`CoreConfig::wp_async`).
pub type Digest = u128;

/// What opening a page read from the device needs: whose page it is and its seal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sealed {
    pub owner: u32,
    pub page: u64,
    pub seal: Seal,
}

/// What the core is told at start-up.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoreConfig {
    /// Resident pages the pager aims to keep regions within.
    pub budget_pages: u64,
    /// Pages faults may install above the budget before they wait for room (pages on
    /// their way out count as resident, so this also bounds the swap-out in flight).
    pub slack_pages: u64,
    /// Victims per eviction round (up to 4 rounds' worth while victims are sequential).
    pub evict_batch_pages: usize,
    /// Reference bits from write faults too: the CLOCK hand write-protects the pages
    /// whose bit it clears (see `PagerConfig::reference_sampling` in the shell).
    pub reference_sampling: bool,
    /// The most revolutions of the hand between two looks at a referenced page by
    /// reference sampling, a power of two (1: every pass). The period follows what the
    /// looks find (`src/sampling.rs`): longer while most pages looked at are written
    /// before the hand comes back, shorter while few are.
    pub sampling_period_max: u32,
    /// The largest read-ahead window beyond a faulting page, at most
    /// [`READAHEAD_PAGES_MAX`] (0: off). The valid slots after the faulting page's are
    /// read with it into a cache of pages the shell allocates
    /// ([`PagerCore::readahead_cache_pages`]); the window follows the hits.
    pub readahead_pages: u32,
    /// Pages the GC moves per batch; the shell's GC buffer holds twice that
    /// ([`Engine::gc_buffer_pages`]), memory the program's budget pays for.
    pub gc_batch_pages: u32,
    /// Pages of the inactive list (0: none). Victims are parked first (moved out of the
    /// program's reach to their region's shadow, `src/park.rs`), and the oldest parked
    /// pages are the ones written out: a touch meanwhile, read or write, brings a page
    /// back without I/O. Regions added with no shadow are never parked.
    pub park_pages: u64,
    pub regions_max: u32,
    pub tenants: u32,
    pub policy: PolicyKind,
    /// The shell seals every page an append writes (`IoPlan::seals_mut`) and opens
    /// every page a fault reads (`FaultStep::Read`'s `sealed`): the core keeps each
    /// swapped page's seal (24 bytes per page of a region, resident only where pages
    /// were swapped). A page read ahead is opened when a fault wants it, under the lock
    /// (`FaultStep::OpenCached`) with the pages next to it that are mapped along.
    pub encrypt: bool,
    /// Writes are seen without faults (`UFFD_FEATURE_WP_ASYNC`): a write to a protected
    /// page goes ahead, and the page reads as written to a scan (`PAGEMAP_SCAN`) until it
    /// is protected again. Needs the inactive list, and a shadow for every region: with
    /// no fault to stop a write, a victim is never written out where the program can
    /// write it, only once parked. The hand's victims are scanned before they are moved
    /// (a written one is referenced: reference sampling's write faults, without the
    /// faults), and a swap-cached page is told clean by its digest once parked
    /// (`EvictorShell::digest`, `IoPlan::digests_mut`): `docs/wp-async-facts.md`.
    /// Reference sampling is implied (the hand protects every page whose bit it
    /// clears): the scan only reports, and a page never protected again would read as
    /// written for ever.
    pub wp_async: bool,
    /// Pages that come back within the budget's refault distance earn passes of the
    /// CLOCK hand before it may pick them again (`src/refault.rs`): what the program
    /// only reads is kept, as an accessed bit would keep it.
    pub refault_passes: bool,
}

impl CoreConfig {
    /// The core's defaults for a budget of `budget_pages`: a slack of an eighth of it (64
    /// to 1024 pages: sequential eviction keeps 1 MiB appends going back to back),
    /// 64-page eviction batches, reference sampling, read-ahead, the whole GC batch, no
    /// inactive list, one tenant, per-core placement, no sealing. Each use changes what
    /// it decides otherwise (`PagerConfig`'s constructors, the pager DST's scenarios).
    pub fn new(budget_pages: u64) -> CoreConfig {
        CoreConfig {
            budget_pages,
            slack_pages: (budget_pages / 8).clamp(64, 1024),
            evict_batch_pages: 64,
            reference_sampling: true,
            sampling_period_max: SAMPLING_PERIOD_MAX_DEFAULT,
            readahead_pages: READAHEAD_PAGES_DEFAULT,
            gc_batch_pages: GC_BATCH_PAGES_DEFAULT,
            park_pages: 0,
            regions_max: 64,
            tenants: 1,
            policy: PolicyKind::PerCore,
            encrypt: false,
            wp_async: false,
            refault_passes: true,
        }
    }
}

/// Why the core cannot start, or cannot take a region. Typed: the shell wraps it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    #[error("the budget ({budget_pages} pages) must hold at least {min_pages} pages (two eviction batches)")]
    BudgetTooSmall { budget_pages: u64, min_pages: u64 },
    #[error("the engine refused the device geometry: {0}")]
    Config(#[from] ConfigError),
    #[error("too many regions alive ({max}, the pager's `regions_max`); free one or raise it")]
    TooManyRegions { max: u32 },
    #[error("tenant {tenant} is not one of the pager's {tenants} (its `tenants`)")]
    NoSuchTenant { tenant: u32, tenants: u32 },
    #[error("the engine refused the region: {0}")]
    Owner(#[from] OwnerError),
    #[error(
        "the device has {zones} zones and the swap engine needs at least {zones_min} of this size (its open \
         swap-zones, the GC's zones and its reserve of empty zones): use a device with more zones"
    )]
    TooFewZones { zones: u32, zones_min: u32 },
    #[error("a sampling period of at most {period} revolutions asked for: a power of two from 1 to {max}")]
    SamplingPeriod { period: u32, max: u32 },
    #[error("read-ahead of {pages} pages asked for: at most {max}")]
    ReadaheadTooLarge { pages: u32, max: u32 },
    #[error(
        "asynchronous write protection needs the inactive list (a victim may only be written out once parked): \
         give it some pages"
    )]
    WpAsyncNeedsPark,
    #[error("with asynchronous write protection every region needs a shadow to park its pages in")]
    WpAsyncNeedsShadow,
    #[error("a fork's child inherits page {page}, which is {what}: only slots on the device and lost pages are")]
    NotInheritable { page: u64, what: &'static str },
}

/// The engine's configuration for a device of `geometry`. A small device cannot keep as
/// many zones open as it allows and still hold the GC's empty-zone watermarks: fewer
/// are opened (always within the device's limits), and with too few open zones for
/// every GC stream the policy asks for, survivors of neighbouring classes share one,
/// down to a single stream.
fn engine_config(geometry: Geometry, chunk_footer: bool, config: &CoreConfig) -> Result<Config, ConfigError> {
    let mut engine_config = Config::new(geometry);
    if chunk_footer {
        engine_config.record_encoding = Some(RecordEncoding::ChunkFooter);
    }
    engine_config.owners_max = config.regions_max;
    engine_config.gc_batch_pages_max = config.gc_batch_pages;
    engine_config.tenants_max = config.tenants.max(1);
    engine_config.gc_streams = config.policy.gc_streams();
    while let Err(error) = engine_config.derive() {
        let g = &mut engine_config.geometry;
        let limit = match (g.max_open_zones, g.max_active_zones) {
            (0, 0) => engine_config.swap_zones_default,
            (0, a) | (a, 0) => a,
            (o, a) => o.min(a),
        };
        if limit <= 3 {
            if engine_config.gc_streams > 1 {
                engine_config.gc_streams -= 1;
                continue;
            }
            return Err(error);
        }
        g.max_open_zones = limit - 1;
        g.max_active_zones = limit - 1;
    }
    Ok(engine_config)
}

/// The pager's state machine. See the crate docs for the calling order.
pub struct PagerCore {
    engine: Engine,
    config: CoreConfig,
    regions: Vec<Region>,
    /// Regions ever added (the last one's generation).
    generations: u64,
    /// The out handles: one per page between its pick and its swap-out's completion
    /// (`src/out.rs`).
    out: OutPages,
    /// Pages awaiting their discard, those being discarded, agents late to answer
    /// (`src/discard.rs`).
    drops: Drops,
    /// The inactive list: parked pages, oldest first (`src/park.rs`).
    parked: std::collections::VecDeque<park::ParkedPage>,
    /// Every tenant: its own budget, counts, limits and swap cache feedback
    /// (`src/tenant.rs`).
    tenants: Tenants,
    /// The CLOCK hand and the eviction rounds (`src/evict.rs`).
    rounds: Rounds,
    /// How often reference sampling looks at a referenced page.
    sampling: sampling::Sampling,
    /// Who is asleep, and the wake-ups owed (`src/action.rs`).
    threads: Threads,
    /// What the user is to hear, once (`src/notice.rs`).
    notices: Notices,
    stats: CoreStats,
    /// Which pages of the shell's read-ahead cache hold what.
    readahead: ReadaheadCache,
    /// Evictions so far, each page's stamped with it (`src/refault.rs`).
    evictions: refault::EvictionClock,
    /// `append_done`'s dirtied flags: the pager reports writes during write-out through
    /// `Engine::dirtied`, so no append ever carries a dirtied page of its own.
    no_dirtied: Vec<bool>,
}

impl PagerCore {
    /// Checks that a core could start with `config` on a device of `geometry`, with no
    /// allocation: for a launcher that wants to refuse a device or a budget before it
    /// starts anything.
    pub fn check(geometry: Geometry, chunk_footer: bool, config: &CoreConfig) -> Result<(), CoreError> {
        let min_pages = 2 * config.evict_batch_pages as u64;
        if config.budget_pages < min_pages {
            return Err(CoreError::BudgetTooSmall { budget_pages: config.budget_pages, min_pages });
        }
        if config.readahead_pages > READAHEAD_PAGES_MAX {
            return Err(CoreError::ReadaheadTooLarge { pages: config.readahead_pages, max: READAHEAD_PAGES_MAX });
        }
        if !config.sampling_period_max.is_power_of_two() || config.sampling_period_max > SAMPLING_PERIOD_MAX {
            return Err(CoreError::SamplingPeriod { period: config.sampling_period_max, max: SAMPLING_PERIOD_MAX });
        }
        if config.wp_async && config.park_pages == 0 {
            return Err(CoreError::WpAsyncNeedsPark);
        }
        match engine_config(geometry, chunk_footer, config) {
            Ok(_) => Ok(()),
            Err(error) => {
                // Too few zones is the usual reason: say how many it takes.
                let fits = |zones: u32| engine_config(Geometry { zone_count: zones, ..geometry }, chunk_footer, config);
                let zones_min = (geometry.zone_count + 1..=geometry.zone_count.saturating_mul(2).max(64))
                    .find(|&zones| fits(zones).is_ok());
                Err(match zones_min {
                    Some(zones_min) => CoreError::TooFewZones { zones: geometry.zone_count, zones_min },
                    None => CoreError::Config(error),
                })
            }
        }
    }

    /// A core for a device of `geometry` (in pages). `chunk_footer`: the device cannot
    /// carry a 16-byte record per page, so records go in a footer page per chunk.
    pub fn new(geometry: Geometry, chunk_footer: bool, config: CoreConfig) -> Result<PagerCore, CoreError> {
        PagerCore::check(geometry, chunk_footer, &config)?;
        let engine_config = engine_config(geometry, chunk_footer, &config)?;
        let engine = Engine::new(engine_config, config.policy.build(config.tenants.max(1)))?;
        let append_pages_max = engine.derived().append_pages_max as usize;
        let out_count = config.evict_batch_pages * evict::ROUND_BATCHES_MAX + append_pages_max;
        Ok(PagerCore {
            engine,
            regions: Vec::with_capacity(config.regions_max as usize),
            generations: 0,
            out: OutPages::new(out_count),
            drops: Drops::new(out_count + config.park_pages as usize, config.regions_max),
            parked: std::collections::VecDeque::with_capacity(
                config.park_pages as usize + evict::ROUND_BATCHES_MAX * config.evict_batch_pages,
            ),
            tenants: Tenants::new(config.tenants.max(1)),
            rounds: Rounds::default(),
            threads: Threads::default(),
            notices: Notices::default(),
            stats: CoreStats::default(),
            evictions: refault::EvictionClock::default(),
            no_dirtied: vec![false; append_pages_max],
            readahead: ReadaheadCache::new(config.readahead_pages),
            sampling: sampling::Sampling::new(config.sampling_period_max),
            config,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    pub fn stats(&self) -> CoreStats {
        let (sampling_looked_at, sampling_written) = self.sampling.totals();
        CoreStats { sampling_period: self.sampling.period(), sampling_looked_at, sampling_written, ..self.stats }
    }

    /// Out handles: the most pages between their pick and their swap-out's completion
    /// (discard batches need room for as many).
    pub fn out_handles(&self) -> usize {
        self.out.len()
    }

    /// Largest append the engine emits, in pages.
    pub fn append_pages_max(&self) -> usize {
        self.engine.derived().append_pages_max as usize
    }

    /// Pages of the read-ahead cache the shell allocates (page-aligned, outside the state
    /// lock): `ReadInto::Cache` and `CopyFrom::Cache` name pages of it.
    pub fn readahead_cache_pages(&self) -> u32 {
        ReadaheadCache::pages_for(self.config.readahead_pages)
    }

    /// Changes the budget while the pager runs: a shell that holds the program's whole
    /// resident set to a limit gives the paged memory what the rest leaves, as the rest
    /// grows and shrinks. A smaller budget wakes the evictor; faults wait for room
    /// beyond the new budget and its slack as they do beyond the first.
    pub fn set_budget(&mut self, budget_pages: u64) -> Result<(), CoreError> {
        let min_pages = 2 * self.config.evict_batch_pages as u64;
        if budget_pages < min_pages {
            return Err(CoreError::BudgetTooSmall { budget_pages, min_pages });
        }
        let grew = budget_pages > self.config.budget_pages;
        self.config.budget_pages = budget_pages;
        self.stats.budget_changes += 1;
        self.wake_evictor();
        if grew {
            // Room for faults waiting for it.
            self.threads.wake_room();
        }
        Ok(())
    }

    /// The smallest budget [`PagerCore::set_budget`] takes, in pages.
    pub fn budget_pages_min(&self) -> u64 {
        2 * self.config.evict_batch_pages as u64
    }

    /// The pager is stopping (its evictors exit): a fault that still comes (a region
    /// kept past the pager) is served beyond the budget rather than left waiting.
    pub fn shut_down(&mut self) {
        self.threads.shut_down();
    }

    /// A notice owed to the user since the last call (each said once in the pager's
    /// life; `budget_overruns` counts every fault it concerns).
    pub fn take_notice(&mut self) -> Option<Notice> {
        self.notices.take()
    }

    /// The wake-ups owed since the last call.
    pub fn take_wakeups(&mut self) -> Wakeups {
        self.threads.take()
    }

    // ------------------------------------------------------------------ regions

    /// Takes a region of `pages` pages mapped at `base` (registered with userfaultfd,
    /// nothing mapped yet); returns its owner id. A freed region's id is reused once the
    /// engine lets it go (no swap-out, swap-in read or GC move in flight names it).
    ///
    /// `shadow`: where the region's shadow is, if it has one: a mapping of the same size,
    /// registered with the same userfaultfd (a move's destination must be), where page
    /// `n` of the region is parked at page `n` (`CoreConfig::park_pages`).
    pub fn region_add(&mut self, base: u64, pages: u64, tenant: u32, shadow: Option<u64>) -> Result<u32, CoreError> {
        assert!(base % PAGE_BYTES as u64 == 0 && pages > 0);
        assert!(shadow.is_none_or(|shadow| shadow % PAGE_BYTES as u64 == 0 && shadow != base));
        if self.config.wp_async && shadow.is_none() {
            return Err(CoreError::WpAsyncNeedsShadow);
        }
        let reusable = (0..self.regions.len())
            .find(|&index| !self.regions[index].live && self.engine.unregister_owner(index as u32).unwrap_or(false));
        let owner = match reusable {
            Some(index) => index as u32,
            None if (self.regions.len() as u32) < self.engine.config().owners_max => self.regions.len() as u32,
            None => return Err(CoreError::TooManyRegions { max: self.engine.config().owners_max }),
        };
        self.engine.register_owner(owner, pages, tenant)?;
        self.generations += 1;
        let region =
            Region::new(self.generations, tenant, base, pages, shadow, self.config.encrypt, self.config.wp_async);
        if owner as usize == self.regions.len() {
            self.regions.push(region);
        } else {
            self.regions[owner as usize] = region;
        }
        Ok(owner)
    }

    /// Takes the region of a fork's child, whose pages are what its parent's were at the
    /// fork (a daemon's tenant that forks, `docs/daemon.md`): `resident` (page indexes)
    /// are mapped in the child, its copies, and counted resident here as pages never
    /// written out; `inherited` (`child_pages` of the parent's region, taken with the
    /// zones held from reset until the child is gone) are the pages the child reads from
    /// the parent's slots when it faults on them; `poisoned` (`poisoned_pages` of the
    /// parent's region) hold the poison markers the child's page table copied, lost to
    /// it too. Every other page is missing and zero, as in a new region. Call
    /// `region_remove` before the parent's hold is let go.
    #[allow(clippy::too_many_arguments)]
    pub fn region_add_inherited(
        &mut self,
        base: u64,
        pages: u64,
        tenant: u32,
        resident: &[u64],
        poisoned: &[u64],
        inherited: &[(u64, ChildPage)],
        now: u64,
    ) -> Result<u32, CoreError> {
        for &(page, from) in inherited {
            let what = match from {
                ChildPage::Slot { .. } | ChildPage::Lost => None,
                ChildPage::Zero => Some("zero"),
                ChildPage::NotOurs => Some("not the pager's"),
                ChildPage::Shadow { .. } => Some("parked"),
            };
            if let Some(what) = what {
                return Err(CoreError::NotInheritable { page, what });
            }
            if page >= pages {
                return Err(CoreError::NotInheritable { page, what: "past the region's end" });
            }
        }
        let owner = self.region_add(base, pages, tenant, None)?;
        for &page in resident.iter().filter(|&&page| page < pages) {
            if self.state(owner, page) != PageState::Unmapped {
                continue;
            }
            let answer = self.engine.swap_in(owner, page, now).expect("swap-in of a new region's page");
            assert_eq!(answer, znswap_core::SwapIn::Zero, "{owner}:{page}: a new region holds nothing");
            self.mark_resident(owner, page);
        }
        for &page in poisoned.iter().filter(|&&page| page < pages) {
            if self.state(owner, page) == PageState::Unmapped
                && self.engine.mark_lost(owner, page).expect("a new region's page")
            {
                self.set_state(owner, page, PageState::Poisoned);
            }
        }
        self.after_engine();
        let region = &mut self.regions[owner as usize];
        for &(page, from) in inherited {
            if region.state(page) == PageState::Unmapped {
                region.inherited.insert(page, region::Inherited { from, reading: false });
            }
        }
        Ok(owner)
    }

    /// Forgets a region before it is unmapped: its slots are freed at once; its pages on
    /// their way out or awaiting a discard are let go as their I/O completes.
    pub fn region_remove(&mut self, owner: u32, now: u64) {
        let region = &mut self.regions[owner as usize];
        assert!(region.live, "region {owner} removed twice");
        let pages = region.pages;
        // Pages awaiting their discard stay counted until the discard (which skips them).
        let resident = region.states.iter().filter(|&&byte| PageState::from_byte(byte).is_resident()).count() as u64;
        self.tenants.uncount_region(region.tenant, region.resident, region.kept);
        region.live = false;
        region.states = Vec::new();
        region.occupied = Vec::new();
        region.seals = Default::default();
        region.digests = Default::default();
        region.inherited = Default::default();
        self.parked.retain(|parked| parked.owner != owner);
        self.engine.free(owner, 0..pages, now).expect("freeing a registered region");
        self.stats.resident_pages -= resident;
        // Its agent's late answer will not come to this region (its process is gone or
        // let go): its pages there count as dropped.
        if self.drops.is_late(owner) {
            self.late_discard_done(owner);
        }
        self.after_engine();
        self.threads.wake_room();
    }

    /// The live regions' address ranges (base, bytes).
    pub fn region_ranges(&self) -> Vec<(u64, u64)> {
        self.regions
            .iter()
            .filter(|region| region.live)
            .map(|region| (region.base, region.pages * PAGE_BYTES as u64))
            .collect()
    }

    /// The region page at `address`, if any.
    pub fn locate(&self, address: u64) -> Option<(u32, u64)> {
        self.regions.iter().enumerate().find_map(|(owner, region)| {
            (region.live && address >= region.base && address < region.end())
                .then(|| (owner as u32, (address - region.base) / PAGE_BYTES as u64))
        })
    }

    /// The state of a live region's page.
    pub fn page_state(&self, owner: u32, page: u64) -> Option<PageState> {
        let region = self.regions.get(owner as usize).filter(|region| region.live)?;
        region.states.get(page as usize).map(|&byte| PageState::from_byte(byte))
    }

    fn page_address(&self, owner: u32, page: u64) -> u64 {
        self.regions[owner as usize].base + page * PAGE_BYTES as u64
    }

    /// Whether the pager parks victims of region `owner`: an inactive list, a shadow,
    /// and no REMOVE-event discard of the program's there (a missing fault on a page
    /// the pager mapped could then mean the program's zap took it, which the pager could
    /// not tell from a page it moved away).
    pub(crate) fn parks_in(&self, owner: u32) -> bool {
        let region = &self.regions[owner as usize];
        self.config.park_pages > 0 && region.live && region.shadow.is_some() && !region.program_discards
    }

    /// Where page `page` of a region with a shadow is parked.
    fn shadow_address(&self, owner: u32, page: u64) -> u64 {
        self.regions[owner as usize].shadow.expect("a region with a shadow") + page * PAGE_BYTES as u64
    }

    /// Moves a page to `to`, checking the move is one the pager makes.
    fn set_state(&mut self, owner: u32, page: u64, to: PageState) {
        let region = &mut self.regions[owner as usize];
        let byte = &mut region.states[page as usize];
        let state = PageState::from_byte(*byte);
        assert!(state == to || state.may_become(to), "page {owner}:{page}: {state:?} -> {to:?} is not a transition");
        *byte = to.to_byte();
        region.count_occupancy(page, state, to);
        // Chosen to leave memory (in place, or from the inactive list): stamped.
        if self.config.refault_passes
            && state != to
            && matches!(to, PageState::Evicting { .. } | PageState::WritingParked)
        {
            self.evictions.evicted(&mut region.heat, page);
        }
        let resident = to.counts_resident() as i64 - state.counts_resident() as i64;
        let kept = to.is_kept() as i64 - state.is_kept() as i64;
        region.resident = region.resident.wrapping_add_signed(resident);
        region.kept = region.kept.wrapping_add_signed(kept);
        self.tenants.count_pages(region.tenant, resident, kept);
    }

    fn state(&self, owner: u32, page: u64) -> PageState {
        self.regions[owner as usize].state(page)
    }

    fn same_region(&self, owner: u32, generation: u64) -> bool {
        self.regions.get(owner as usize).is_some_and(|region| region.live && region.generation == generation)
    }

    /// An unmapped page was installed: counted resident and referenced. With an
    /// inactive list it starts unreferenced instead, as Linux puts new and swapped-in
    /// anonymous pages on its inactive list: it is parked at the hand's next pass, and
    /// earns its place by a touch there. A page used once (a stream written and left)
    /// then goes at once, not after two passes of the hand.
    fn mark_resident(&mut self, owner: u32, page: u64) {
        if self.config.refault_passes {
            let region = &mut self.regions[owner as usize];
            match self.evictions.installed(&mut region.heat, page, self.config.budget_pages) {
                refault::Refault::First => {}
                refault::Refault::Short => self.stats.refaults_short += 1,
                refault::Refault::Near => {
                    self.stats.refaults_long += 1;
                    self.stats.refaults_near += 1;
                }
                refault::Refault::Long => self.stats.refaults_long += 1,
            }
        }
        self.set_state(owner, page, if self.parks_in(owner) { PageState::Resident } else { PageState::Referenced });
        self.stats.resident_pages += 1;
        self.stats.resident_pages_max = self.stats.resident_pages_max.max(self.stats.resident_pages);
        self.wake_evictor();
    }

    /// The core's counters of pages in flight, for a report of a hang.
    pub fn describe(&self) -> String {
        format!(
            "resident {} writing {} parked {} to drop {} discarding {} out free {} evicting {} round in flight {} \
             swap full {} evictors asleep {} io asleep {} engine I/O in flight {}",
            self.stats.resident_pages,
            self.out.writing(),
            self.parked.len(),
            self.drops.waiting(),
            self.drops.discarding_pages(),
            self.out.free(),
            self.out.evicting(),
            self.rounds.in_flight(),
            self.engine.swap_full(),
            self.threads.evictors_asleep(),
            self.threads.io_asleep(),
            self.engine.io_in_flight()
        )
    }

    // --------------------------------------------------------------- invariants

    /// The counts every completion must leave consistent, in O(1): checked after each
    /// (the full check, `check_invariants`, walks every page).
    pub(crate) fn assert_counts(&self) {
        self.out.check();
        assert!(
            self.stats.resident_pages >= self.drops.dropping_pages() + self.drops.discarding_pages(),
            "resident count {} below the pages awaiting a discard",
            self.stats.resident_pages
        );
    }

    /// Checks the page states against each other, the counters and the engine
    /// (expensive: simulation and tests only). Panics naming what broke.
    pub fn check_invariants(&self) {
        use znswap_core::PageState as Engine;
        let mut resident = 0u64;
        let mut writing = 0u64;
        let mut parked = 0u64;
        let mut tenants = vec![(0, 0); self.tenants.len() as usize];
        for (owner, region) in self.regions.iter().enumerate() {
            if !region.live {
                continue;
            }
            let states = || region.states.iter().map(|&byte| PageState::from_byte(byte));
            let counted = states().filter(|state| state.counts_resident()).count() as u64;
            let kept = states().filter(|state| state.is_kept()).count() as u64;
            assert_eq!(
                (region.resident, region.kept),
                (counted, kept),
                "region {owner}'s counts of resident and kept pages against its page states"
            );
            tenants[region.tenant as usize].0 += counted;
            tenants[region.tenant as usize].1 += kept;
            let mut occupied = vec![0u16; region.occupied.len()];
            for (page, state) in region.states.iter().map(|&byte| PageState::from_byte(byte)).enumerate() {
                let engine = self.engine.page_state(owner as u32, page as u64).expect("a live region's page");
                let agrees = match state {
                    PageState::Unmapped => {
                        matches!(
                            engine,
                            Engine::Zero | Engine::Swapped { .. } | Engine::SwapInFlight { .. } | Engine::Lost
                        )
                    }
                    PageState::Resident
                    | PageState::Referenced
                    | PageState::Evicting { .. }
                    | PageState::Parking { .. }
                    | PageState::Parked => {
                        matches!(engine, Engine::Resident | Engine::SwapCached { .. })
                    }
                    PageState::Writing | PageState::WritingParked => matches!(engine, Engine::SwapOutInFlight { .. }),
                    // Swapped (perhaps moved by the GC, or its zone lost), or a zero entry.
                    PageState::Dropping => matches!(engine, Engine::Zero | Engine::Swapped { .. } | Engine::Lost),
                    PageState::Poisoned => engine == Engine::Lost,
                    // Discarded: nothing kept.
                    PageState::Removed | PageState::ParkingRemoved => engine == Engine::Zero,
                };
                assert!(agrees, "page {owner}:{page} is {state:?} for the pager but {engine:?} for the engine");
                assert!(
                    !region.inherited.contains_key(&(page as u64))
                        || state == PageState::Unmapped && engine == Engine::Zero,
                    "page {owner}:{page} is inherited from a fork's parent but {state:?} / {engine:?}"
                );
                occupied[page / region::OCCUPANCY_BLOCK_PAGES as usize] += (state != PageState::Unmapped) as u16;
                resident += state.is_resident() as u64;
                writing += matches!(state, PageState::Writing | PageState::WritingParked) as u64;
                parked += (state == PageState::Parked) as u64;
                assert!(
                    !state.is_parked() || region.shadow.is_some(),
                    "page {owner}:{page} is {state:?} in a region with no shadow"
                );
            }
            assert_eq!(region.occupied, occupied, "region {owner}'s blocks' occupancy against its page states");
        }
        for (tenant, &counted) in tenants.iter().enumerate() {
            let tenant = tenant as u32;
            assert_eq!(
                self.tenants.pages(tenant),
                counted,
                "tenant {tenant}'s resident and kept pages against its regions'"
            );
        }
        self.tenants.check();
        assert_eq!(
            self.tenants.swap_ins(),
            self.stats.swap_in_reads,
            "the tenants' pages read back against the pager's"
        );
        assert_eq!(parked, self.parked.len() as u64, "parked pages against the inactive list");
        for entry in &self.parked {
            assert_eq!(self.state(entry.owner, entry.page), PageState::Parked, "{entry:?} on the inactive list");
        }
        self.drops.check();
        let dropping = self.drops.dropping_pages() + self.drops.discarding_pages();
        assert_eq!(
            self.stats.resident_pages,
            resident + dropping,
            "resident count against the resident pages and those awaiting a discard"
        );
        // Freed regions' swap-outs still count until they complete.
        assert!(
            self.out.writing() >= writing,
            "{} writing pages counted, {writing} in live regions",
            self.out.writing()
        );
        self.out.check();
    }
}
