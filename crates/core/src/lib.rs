//! znswap-core: the swap engine of ZNSwap (USENIX ATC '22) as a sans-I/O state machine.
//!
//! No threads, no syscalls, no clock, no page bytes: time comes in as `now`, inputs are
//! method calls, outputs are polled records. See [`Engine`] for the calling order.
//!
//! Rooms: [`config`] (geometry and tunables), [`record`] (on-device reverse-map records,
//! `docs/format.md`), [`slot_map`] (2-bit slot maps and zone counters), [`owner_table`]
//! (the user-space page table), [`victim_index`] (bucketed GC candidates), [`policy`]
//! (Table 1 API and the sample policies), `engine` (the state, slot changes, outputs,
//! policy API, invariants), `swap_out` (Appendix A, append merging, chunk aggregator),
//! `swap_in` (swap-in, swap cache, dirtying, freeing), `zones` (swap-zone backing, open
//! and reserve limits, FAR reset, finish, offline zones), `gc` (ZNGC stages), [`stats`];
//! [`driver`] (a reference driver over a model device, for tests and simulations).

// `is_multiple_of` and `is_none_or` are newer than the workspace's rust-version (1.80).
#![allow(clippy::manual_is_multiple_of, clippy::unnecessary_map_or)]

pub mod config;
pub mod driver;
mod engine;
mod gc;
pub mod io;
pub mod owner_table;
pub mod policy;
pub mod record;
pub mod slot_map;
pub mod stats;
mod swap_in;
mod swap_out;
pub mod victim_index;
mod zones;

pub use config::{
    Config, ConfigError, Derived, Geometry, RecordEncoding, ResetMode, SwapCacheMode, VictimSelection, PAGE_BYTES,
};
pub use engine::{Engine, EngineError, Event, HostMemory, ReadOutcome, SwapIn, SwapOutError, SwapOutOutcome, Ticket};
pub use io::{AppendPage, Buf, IoError, IoId, IoRequest};
pub use owner_table::{OwnerError, PageState};
pub use policy::{HistorySpan, PageInfo, Policy, PolicyKind, PolicyView, SwapInfo, SwapZoneId, VmInfo, ZoneInfo};
pub use slot_map::{SlotAddress, SlotState};
pub use stats::{waf, Stats};
pub use zones::{far_threshold_pages, HoldsInfo, ResetHold};
