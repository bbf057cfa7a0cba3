//! znswap's live pager: application memory beyond a budget lives on a
//! zoned device and comes back on fault, through userfaultfd.
//!
//! - [`uffd`]: the userfaultfd system call and ioctls, defined over `libc` (no bindgen).
//! - [`Pager`]: regions, the fault handler and the evictor, driving `znswap-core`.
//! - [`pagemap`]: `PAGEMAP_SCAN`, the written pages of a range without a fault.
//! - [`TenantLink`]: serving other processes' memory ([`Pager::serve`], [`Pager::add_tenant`]);
//!   the daemon (`znswap-daemon`) takes their connections.

mod config;
mod latency;
pub mod lost_pages;
mod page_buffers;
pub mod pagemap;
mod pager;
pub mod pager_thread;
pub mod run_env;
mod self_paging;
mod signals;
mod sys;
mod tenant;
pub mod uffd;

pub use config::{
    FaultMode, PagerConfig, DAEMON_PROCESSES_MAX, DAEMON_TENANTS_MAX, EXIT_DAEMONIZED, EXIT_PAGER_FAILED,
    FAULT_POLL_US_DEFAULT, FAULT_POLL_US_MAX, HANDLER_THREADS_SERVED,
};
pub use pager::{
    check_compressed_pool_share, FaultTimeTotals, FaultTimes, ForkSnapshot, Pager, PagerError, PagerStats, Region,
    TenantId,
};
pub use self_paging::SelfPagingError;
pub use sys::{map_anonymous, process_cpu_ns, thread_cpu_ns};
pub use tenant::{
    agent_loop, hand_over, serve_orphaned, serve_orphaned_events, DroppedPages, ForkFill, HandedOver, Orphaned,
    TenantError, TenantLink,
};
pub use znswap_pager_core::{CoreConfig, CoreStats};
pub use znswap_pager_core::{
    CoreError, TenantFigures, GC_BATCH_PAGES_DEFAULT, PAGE_BYTES, READAHEAD_PAGES_DEFAULT, READAHEAD_PAGES_MAX,
    SAMPLING_PERIOD_MAX_DEFAULT,
};
