//! A sans-I/O model of Linux 5.12's swap on a conventional (block) SSD, the baseline the
//! ZNSwap paper compares against (USENIX ATC '22, §3 and §6).
//!
//! [`SwapDevice`] is one swap area (`swap_info_struct`): its `swap_map`, its clusters,
//! the per-CPU current clusters and scan bases, the discard lists and the swap-cache rule.
//! It never touches a device or a clock: the simulator's host calls it and turns its
//! answers into device writes (a slot from [`SwapDevice::alloc`]), reads (a window from
//! [`SwapDevice::readahead`]) and TRIMs ([`SwapDevice::take_discards`]).
//!
//! Calling order, per event of the host:
//! - swap-out of a dirty page: `alloc(cpu)`, then `take_discards` and issue those TRIMs
//!   *before* the write of the new slot (the kernel discards synchronously inside the
//!   allocator when it has to, so a TRIM taken here may cover the slot just handed out);
//! - swap-out of a clean swap-cached page: `evict_cached(slot)` (no write: the slot
//!   still holds its data);
//! - fault on a swapped page: `readahead(slot, ..)` gives the slots to read; then
//!   `swap_in(slot, write)` says whether the slot stays as swap cache or was freed;
//! - a swap-cached page written to, or any swapped page freed: `free(slot)`;
//! - after each call: `take_discards` (TRIMs) and `take_reclaimed` (swap-cached pages
//!   whose slot the allocator took back, which must be written again when evicted).
//!
//! Every rule names the Linux 5.12 function it models (mm/swapfile.c, mm/swap_state.c,
//! mm/memory.c, include/linux/swap.h); see README.md for the list.

mod cluster;
mod config;
mod device;
mod invariants;
mod readahead;
mod rng;
mod scan;

pub use config::{ConfigError, Discard, SwapConfig, PAGE_CLUSTER_MAX, SWAP_FULL_CUTOFF_PERCENT_LINUX};
pub use device::{SlotState, SwapCounters, SwapDevice, SwapIn};
pub use readahead::SwapinReadahead;

/// Slots per cluster: `SWAPFILE_CLUSTER` is `HPAGE_PMD_NR` (512 with 4 KiB pages) when the
/// kernel is built with `CONFIG_THP_SWAP`, as distribution kernels are (256 without).
pub const SWAPFILE_CLUSTER: u64 = 512;

/// `SWAP_ADDRESS_SPACE_PAGES`: the swap cache is split into address spaces of 2^14 slots
/// (64 MiB); the SSD scan base jumps to a random such trunk when it crosses one.
pub const SWAP_ADDRESS_SPACE_PAGES: u64 = 1 << 14;

/// `SWAP_CLUSTER_COLS`: the initial free-cluster list is interleaved over this many
/// columns (`max(64 B cache line / 8 B swap_cluster_info, 2^14 / 512)` = 32), so the first
/// sweep visits clusters 0, 32, 64, … then 1, 33, 65, …
pub const SWAP_CLUSTER_COLS: u64 = 32;

/// `LATENCY_LIMIT`: slots the allocator scans before it would `cond_resched()`; bounds
/// the quick scan after a slot was found.
pub const LATENCY_LIMIT: i64 = 256;

/// `SWAP_BATCH`: the most slots one `get_swap_pages` call hands out.
pub const SWAP_BATCH: u32 = 64;

/// The default `vm.page-cluster`: readahead reads 2^3 = 8 slots.
pub const PAGE_CLUSTER_DEFAULT: u32 = 3;

/// Slots per TRIM of [`Discard::Fine8`], the paper's 8-slot mechanism (§3.1.1).
pub const FINE_DISCARD_SLOTS: u64 = 8;
