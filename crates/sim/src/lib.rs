//! znswap-sim: a virtual host driving the znswap engine over a ZNS SSD model, or a model
//! of Linux 5.12 swap over a conventional SSD model, in virtual time; and the paper's
//! experiments (`znswap sim paper`).
//!
//! Rooms: [`events`] (virtual time, the event queue), [`calib`] (CPU costs and where
//! each comes from), [`memory`] (page table, pools, CLOCK), `host` + `host_thread` +
//! `host_reclaim` (the virtual host), [`backend`] (the interface to a swap system),
//! [`znswap`] and [`linux`] (the two back ends), [`workloads`] and [`source`] (what
//! threads run), [`throttle`] (per-tenant bandwidth limits), [`run`] (one run: warm-up,
//! measured window, results), [`metrics`] (histograms, time series).

// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#![allow(clippy::manual_is_multiple_of)]

pub mod backend;
pub mod calib;
pub mod device_runs;
pub mod events;
mod host;
mod host_reclaim;
mod host_thread;
pub mod linux;
pub mod memory;
pub mod metrics;
pub mod paper;
pub mod run;
mod slab;
pub mod source;
pub mod throttle;
pub mod workloads;
pub mod znswap;

pub use backend::{Backend, BackendCounters, Io, Notice, PageId, SwapOutStart};
pub use calib::CpuCosts;
pub use events::{EventQueue, Ns};
pub use host::{Host, HostCounters, HostSetup, TenantSetup};
pub use run::{run, BackendKind, DiscardMode, Phase, RunConfig, RunResult, TenantConfig};
