//! Virtual-time NAND SSD models for the znswap simulator.
//!
//! - [`ZnsSsd`]: a ZNS SSD shaped like the WD ZN540 (zones striped over all dies, strict
//!   write pointers through [`znswap_zoned::ZoneTable`], zone append, reset = erase).
//! - [`BlockSsd`]: a conventional SSD shaped like the WD SN540 on the same NAND: a
//!   page-mapped FTL with over-provisioning, greedy (or FIFO) garbage collection with
//!   separate host and GC write points, background and foreground GC, and TRIM.
//! - [`analytic`]: closed-form write amplification (FIFO limit, Desnoyers' greedy model).
//! - [`waf`]: steady-state WAF runs of the block model (`znswap sim waf --model block`).
//! - [`bench`]: closed-loop drivers measuring virtual bandwidth.
//!
//! Both devices are resource timelines: a command submitted at `now` reserves die and
//! channel time and returns its completion time at once; the caller's event loop
//! schedules the completion. Time never runs backwards inside a device: a `now` earlier
//! than one already seen counts as the latest seen. Nothing reads a wall clock; every
//! result is a pure function of the configuration and the command sequence.

pub mod analytic;
pub mod bench;
mod block;
mod buffer;
mod counters;
mod ftl;
mod nand;
mod timeline;
pub mod waf;
mod zns;

pub use block::{BlockConfig, BlockConfigError, BlockSsd, Victim, RESERVE_BEYOND_FOREGROUND, SUPERBLOCKS_MIN};
pub use counters::MediaCounters;
pub use nand::{NandConfig, NandConfigError};
pub use zns::{ZnsConfig, ZnsConfigError, ZnsSsd};

/// Virtual time in nanoseconds.
pub type Ns = u64;
