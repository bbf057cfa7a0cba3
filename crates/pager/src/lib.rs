//! znswap's live pager: application memory beyond a budget lives on a
//! zoned device and comes back on fault, through userfaultfd.
//!
//! - [`uffd`]: the userfaultfd system call and ioctls, defined over `libc` (no bindgen).
//! - [`Pager`]: regions, the fault handler and the evictor, driving `znswap-core`.
//! - [`pagemap`]: `PAGEMAP_SCAN`, the written pages of a range without a fault.
//! - [`TenantLink`]: serving other processes' memory ([`Pager::serve`], [`Pager::add_tenant`]),
//!   their connections taken and served in [`connection`].

pub mod connection;
mod latency;
pub mod lost_pages;
mod page_buffers;
pub mod pagemap;
mod pager;
pub mod pager_thread;
pub mod run_env;
mod self_paging;
mod signals;
mod tenant;
pub use self_paging::SelfPagingError;
pub use tenant::{
    agent_loop, hand_over, serve_orphaned, serve_orphaned_events, DroppedPages, HandedOver, Orphaned, TenantError,
    TenantLink,
};
pub mod uffd;

pub use znswap_pager_core::{CoreError, TenantFigures};

pub use pager::{
    map_anonymous, process_cpu_ns, thread_cpu_ns, FaultMode, FaultTimeTotals, FaultTimes, ForkFill, ForkSnapshot,
    Pager, PagerConfig, PagerError, PagerStats, Region, TenantId, FAULT_POLL_US_DEFAULT, FAULT_POLL_US_MAX,
    GC_BATCH_PAGES_DEFAULT, PAGE_BYTES, READAHEAD_PAGES_DEFAULT, READAHEAD_PAGES_MAX,
};
