//! Zoned storage for znswap.
//!
//! - [`ZonedDevice`]: what a ZNS namespace offers — geometry, zone reports, reads with
//!   per-LBA metadata, writes at the write pointer, **zone append returning the LBA
//!   written**, and reset / open / close / finish — and nothing of swap.
//! - [`ZoneTable`]: the NVMe ZNS zone state machine with open/active accounting, shared
//!   by the emulated backends.
//! - Backends: [`MemDevice`] (tests, simulator) and [`FileDevice`] (the embedded
//!   default: a file or block device that survives close and reopen).
//! - Real devices: [`zbd::ZonedBlockDevice`] (Linux zoned block devices) behind
//!   [`CheckedDevice`], which validates every command against a mirror of the zones.
//! - [`FaultyDevice`]: any device with failed commands, offline zones and slow
//!   completions injected at random, per a [`FaultSpec`] (`read=0.01,offline=2`).
//! - [`AppendMerger`]: merges appends queued for one zone into one device command
//!   ("zone-append merges", ZNSwap §5.3).
//! - [`CompressedPool`]: appends also kept compressed in RAM, reads served from there
//!   when they can be (a write-through compressed tier).
//! - [`conformance`]: the checks every backend must pass.
//! - [`AlignedBuf`]: page-aligned buffers, which O_DIRECT backends move without a copy.

mod aligned;
mod checked;
mod compressed;
pub mod conformance;
mod device;
mod direct_io;
mod emulated;
mod error;
mod faulty;
pub mod file;
mod geometry;
mod mem;
mod merge;
pub mod nvme;
mod open;
mod polled_read;
mod validate;
pub mod zbd;
mod zone;

pub use aligned::AlignedBuf;
pub use checked::{CheckedDevice, RawZoned};
pub use compressed::{compression_ratio, CompressedPool, PoolStats, COMPRESSED_POOL_MIN_BYTES};
pub use device::{DeviceCounters, FaultInjector, FaultKind, WithoutFaultInjection, ZoneCounters, ZonedDevice};
pub use emulated::{EmulatedDevice, Storage};
pub use error::{Result, ZoneError};
pub use faulty::{FaultSpec, FaultSpecError, FaultyDevice, InjectedFaults, FAULT_SPEC_GRAMMAR};
pub use file::{CreateOptions, FileDevice, FileDeviceError};
pub use geometry::{format_size, parse_size, Geometry, GeometryError, LBA_BYTES_ALLOWED, METADATA_BYTES_ALLOWED};
pub use mem::MemDevice;
pub use merge::{AppendMerger, MergeStats};
pub use open::{open_path, OpenError};
pub use polled_read::{
    pause_polled_reads_on_this_thread, poll_reads_on_this_thread, polled_read_wait_ns_on_this_thread,
    polled_reads_on_this_thread,
};
pub use zone::{WritePlacement, ZoneCondition, ZoneInfo, ZoneOp, ZoneState, ZoneTable};
