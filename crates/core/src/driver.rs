//! A reference driver of the engine's completion protocol over a model device of page
//! versions, for the core's tests, the deterministic simulations and the simulator: one
//! place that captures requests, carries them out on the model and hands the engine
//! their ends. Not a production driver (the live pager is one): its device keeps a
//! version number per slot for the page bytes.
//!
//! What differs between its callers stays with them:
//! - *when* a request runs and completes (the DST's random delays and reordering, the
//!   simulator's device timing): [`poll`] captures each request at `poll_io`,
//!   [`Driver::run`] carries it out when the device would, [`complete`] hands the
//!   engine its end, then or later;
//! - faults, through [`DeviceHooks`]: failing a request, flipping bits of the records a
//!   read returns, reporting contract breaches; zones go offline by
//!   [`ModelDevice::take_offline`];
//! - what a page's content is: a swap-out's buffer handle (`Buf::Page`) is written as
//!   its version, so callers pass the page's version as the handle.
//!
//! Calling order: after every engine input, drain [`poll`]; [`Driver::run`] each
//! captured request (in any order, as a device may), then [`complete`] it with the
//! [`Completion`] `run` returned. A swap-in read (`SwapIn::Read`, never polled) is
//! captured by [`Captured::swap_in`].

mod device;

pub use device::{ContractBreach, ModelDevice, ZoneModel, FOOTER_PAGE_VERSION, UNWRITTEN_VERSION};

use crate::config::{RecordEncoding, PAGE_BYTES};
use crate::engine::{Engine, EngineError, ReadOutcome};
use crate::io::{AppendPage, Buf, IoError, IoId, IoRequest};

/// A request as `poll_io` gave it, with an Append's pages and records copied out, so it
/// can wait (in a device queue, for a delay) while the engine takes more inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    pub request: IoRequest,
    /// An Append's pages, in slot order; empty for other requests.
    pub pages: Vec<AppendPage>,
    /// An Append's records: 16 bytes per page (per-LBA metadata) or the footer page.
    pub records: Vec<u8>,
}

/// Where a request stands in the engine's work: what fault hooks fail or count by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// An Append of swapped-out pages.
    SwapOutAppend,
    /// An Append of pages the GC moves.
    GcAppend,
    /// A read into pages of the caller's: a swap-in.
    SwapInRead,
    /// A GC read of victim data (with its per-LBA metadata, if asked for).
    GcDataRead,
    /// A GC read of a chunk footer.
    GcFooterRead,
    Reset,
    Finish,
}

impl Stage {
    /// GC work: its reads and the appends of the pages it moves.
    pub fn is_gc(self) -> bool {
        matches!(self, Stage::GcAppend | Stage::GcDataRead | Stage::GcFooterRead)
    }
}

impl Captured {
    pub fn new(engine: &Engine, request: IoRequest) -> Captured {
        let (pages, records) = match request {
            IoRequest::Append { io, pages, .. } => {
                let list = engine.append_pages(io);
                assert_eq!(list.len() as u32, pages, "an Append's page list holds its pages");
                (list.to_vec(), engine.append_records(io).to_vec())
            }
            _ => (Vec::new(), Vec::new()),
        };
        Captured { request, pages, records }
    }

    /// The read `Engine::swap_in` answered with (`SwapIn::Read`).
    pub fn swap_in(io: IoId, zone: u32, slot: u32) -> Captured {
        let request = IoRequest::Read { io, zone, slot, pages: 1, buf: Buf::Page(0), with_metadata: false };
        Captured { request, pages: Vec::new(), records: Vec::new() }
    }

    pub fn stage(&self) -> Stage {
        match self.request {
            IoRequest::Append { .. } if self.pages.iter().any(|page| matches!(page.buf, Buf::Gc(_))) => Stage::GcAppend,
            IoRequest::Append { .. } => Stage::SwapOutAppend,
            IoRequest::Read { buf, .. } => read_stage(buf),
            IoRequest::Reset { .. } => Stage::Reset,
            IoRequest::Finish { .. } => Stage::Finish,
        }
    }
}

fn read_stage(buf: Buf) -> Stage {
    match buf {
        Buf::Gc(_) => Stage::GcDataRead,
        Buf::Footer => Stage::GcFooterRead,
        Buf::Page(_) | Buf::Zero => Stage::SwapInRead,
    }
}

/// The next request of `engine`, captured.
pub fn poll(engine: &mut Engine) -> Option<Captured> {
    let request = engine.poll_io()?;
    Some(Captured::new(engine, request))
}

/// How a request ended on the device, by kind: what [`complete`] hands the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The slot the Append's first page landed at.
    Append(Result<u32, IoError>),
    /// `records`: a GC read's per-LBA metadata (when asked for) or footer page;
    /// `versions`: the slots' versions for a read into pages of the caller's (a swap-in).
    Read {
        result: Result<(), IoError>,
        records: Vec<u8>,
        versions: Vec<u64>,
    },
    Reset(Result<(), IoError>),
    Finish(Result<(), IoError>),
}

impl Completion {
    /// `request` failed with `error` before it reached the device.
    pub fn failed(request: &IoRequest, error: IoError) -> Completion {
        match request {
            IoRequest::Append { .. } => Completion::Append(Err(error)),
            IoRequest::Read { .. } => {
                Completion::Read { result: Err(error), records: Vec::new(), versions: Vec::new() }
            }
            IoRequest::Reset { .. } => Completion::Reset(Err(error)),
            IoRequest::Finish { .. } => Completion::Finish(Err(error)),
        }
    }

    /// The versions a read into pages of the caller's returned (none for other requests).
    pub fn versions(&self) -> &[u64] {
        match self {
            Completion::Read { versions, .. } => versions,
            _ => &[],
        }
    }

    pub fn is_ok(&self) -> bool {
        match self {
            Completion::Append(result) => result.is_ok(),
            Completion::Read { result, .. } | Completion::Reset(result) | Completion::Finish(result) => result.is_ok(),
        }
    }
}

/// What callers change about how the model device carries requests out. Every method
/// has the fault-free default.
pub trait DeviceHooks {
    /// Whether a request at `stage` to `zone` (online) fails with a device error instead
    /// of running.
    fn inject_error(&mut self, _stage: Stage, _zone: u32) -> bool {
        false
    }

    /// May change the records a read returns before the engine sees them (bit flips of a
    /// medium going bad); called for reads that returned any.
    fn records_read(&mut self, _stage: Stage, _records: &mut [u8]) {}

    /// The engine broke the device contract; the request fails with a device error.
    fn contract_breached(&mut self, breach: ContractBreach) {
        panic!("device contract breached: {}", breach.0);
    }
}

/// No faults; contract breaches are kept for the caller to report.
#[derive(Debug, Default)]
pub struct NoFaults {
    pub breaches: Vec<ContractBreach>,
}

impl DeviceHooks for NoFaults {
    fn contract_breached(&mut self, breach: ContractBreach) {
        self.breaches.push(breach);
    }
}

/// The model device with the GC move buffer the engine reads into and appends from.
pub struct Driver {
    pub device: ModelDevice,
    /// The version each GC move buffer page holds (`Buf::Gc`).
    pub gc_buffers: Vec<u64>,
    footers: bool,
}

impl Driver {
    /// A model of the device `engine` was configured for, all zones empty. Its limit of
    /// active zones is the engine's of open zones (a device's own may be larger:
    /// `device.active_zones_max`).
    pub fn new(engine: &Engine) -> Driver {
        let geometry = engine.config().geometry;
        let derived = engine.derived();
        let footers = derived.encoding == RecordEncoding::ChunkFooter;
        let mut device = ModelDevice::new(
            geometry.zone_count,
            geometry.zone_capacity_pages,
            geometry.metadata_bytes,
            geometry.write_granularity_pages,
            footers,
        );
        device.active_zones_max = derived.open_zones_max;
        Driver { device, gc_buffers: vec![UNWRITTEN_VERSION; engine.gc_buffer_pages() as usize], footers }
    }

    /// The version an Append writes for a page from `buf`.
    pub fn version_of(&self, buf: Buf) -> u64 {
        match buf {
            Buf::Page(handle) => handle,
            Buf::Gc(page) => self.gc_buffers[page as usize],
            Buf::Footer => FOOTER_PAGE_VERSION,
            Buf::Zero => 0,
        }
    }

    /// Carries `captured` out on the model device: an Append writes its pages' versions
    /// and records, a GC read fills the GC buffer and returns the records, a swap-in
    /// read returns the versions, a reset or finish moves the write pointer. A request
    /// to an offline zone fails as offline; `hooks` may fail the others.
    pub fn run(&mut self, captured: &Captured, hooks: &mut impl DeviceHooks) -> Completion {
        let stage = captured.stage();
        match captured.request {
            IoRequest::Append { zone, .. } => {
                let result = self.online(zone, stage, hooks).and_then(|()| {
                    let versions: Vec<u64> = captured.pages.iter().map(|page| self.version_of(page.buf)).collect();
                    let records = &captured.records[..];
                    let (page_records, footer) =
                        if self.footers { (None, Some(records)) } else { (Some(records), None) };
                    self.device.append(zone, &versions, page_records, footer).map_err(|breach| {
                        hooks.contract_breached(breach);
                        IoError::Device
                    })
                });
                Completion::Append(result)
            }
            IoRequest::Read { zone, slot, pages, buf, with_metadata, .. } => {
                self.read(zone, slot, pages, buf, with_metadata, stage, hooks)
            }
            IoRequest::Reset { zone, .. } => {
                let result = self.online(zone, stage, hooks);
                if result.is_ok() {
                    self.device.reset(zone);
                }
                Completion::Reset(result)
            }
            IoRequest::Finish { zone, .. } => {
                let result = self.online(zone, stage, hooks);
                if result.is_ok() {
                    self.device.finish(zone);
                }
                Completion::Finish(result)
            }
        }
    }

    /// Reads `pages` slots from `slot` of `zone` into pages of the caller's (a swap-in
    /// whose request the caller does not hold): their versions.
    pub fn read_pages(
        &mut self,
        zone: u32,
        slot: u32,
        pages: u32,
        hooks: &mut impl DeviceHooks,
    ) -> Result<Vec<u64>, IoError> {
        match self.read(zone, slot, pages, Buf::Page(0), false, Stage::SwapInRead, hooks) {
            Completion::Read { result, versions, .. } => result.map(|()| versions),
            other => unreachable!("a read ended as {other:?}"),
        }
    }

    #[allow(clippy::too_many_arguments)] // a read request's fields, and how to run it
    fn read(
        &mut self,
        zone: u32,
        slot: u32,
        pages: u32,
        buf: Buf,
        with_metadata: bool,
        stage: Stage,
        hooks: &mut impl DeviceHooks,
    ) -> Completion {
        let result = self.online(zone, stage, hooks).and_then(|()| {
            self.device.check_read(zone, slot, pages).map_err(|breach| {
                hooks.contract_breached(breach);
                IoError::Device
            })
        });
        let (mut records, mut versions) = (Vec::new(), Vec::new());
        if result.is_ok() {
            match buf {
                Buf::Gc(first) => {
                    for index in 0..pages {
                        self.gc_buffers[(first + index) as usize] = self.device.version(zone, slot + index);
                        if with_metadata {
                            self.device.read_metadata(zone, slot + index, &mut records);
                        }
                    }
                }
                Buf::Footer => match self.device.footer(zone, slot) {
                    Some(footer) => records.extend_from_slice(footer),
                    None => records.resize(PAGE_BYTES, 0),
                },
                Buf::Page(_) | Buf::Zero => {
                    versions.extend((slot..slot + pages).map(|index| self.device.version(zone, index)))
                }
            }
            if !records.is_empty() {
                hooks.records_read(stage, &mut records);
            }
        }
        Completion::Read { result, records, versions }
    }

    /// Whether a request may run: its zone online and no fault injected.
    fn online(&self, zone: u32, stage: Stage, hooks: &mut impl DeviceHooks) -> Result<(), IoError> {
        if self.device.zones[zone as usize].offline {
            Err(IoError::Offline)
        } else if hooks.inject_error(stage, zone) {
            Err(IoError::Device)
        } else {
            Ok(())
        }
    }
}

/// The engine refused a completion: a driver bug, or a request completed twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} refused: {error}")]
pub struct Refused {
    /// The completion call: `append_done`, `read_done`, `reset_done` or `finish_done`.
    pub call: &'static str,
    pub error: EngineError,
}

/// Hands the engine how `request` ended: the `*_done` call of its kind (`dirtied`: an
/// Append's pages written during it, Appendix A). A read's outcome comes back.
pub fn complete(
    engine: &mut Engine,
    request: &IoRequest,
    completion: &Completion,
    dirtied: &[bool],
    now: u64,
) -> Result<Option<ReadOutcome>, Refused> {
    let refused = |call| move |error| Refused { call, error };
    match (*request, completion) {
        (IoRequest::Append { io, .. }, Completion::Append(result)) => {
            engine.append_done(io, *result, dirtied, now).map(|()| None).map_err(refused("append_done"))
        }
        (IoRequest::Read { io, .. }, Completion::Read { result, records, .. }) => {
            engine.read_done(io, *result, records, now).map(Some).map_err(refused("read_done"))
        }
        (IoRequest::Reset { io, .. }, Completion::Reset(result)) => {
            engine.reset_done(io, *result, now).map(|()| None).map_err(refused("reset_done"))
        }
        (IoRequest::Finish { io, .. }, Completion::Finish(result)) => {
            engine.finish_done(io, *result, now).map(|()| None).map_err(refused("finish_done"))
        }
        (request, completion) => panic!("{completion:?} does not complete {request:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_device_reports_contract_breaches() {
        let mut device = ModelDevice::new(4, 8, 16, 2, false);
        device.active_zones_max = 1;
        assert!(device.append(0, &[1; 3], None, None).is_err(), "breaks the granularity");
        assert_eq!(device.append(0, &[1; 2], None, None), Ok(0));
        assert!(device.append(1, &[1; 2], None, None).is_err(), "opens a second active zone");
        assert!(device.append(0, &[1; 8], None, None).is_err(), "beyond the capacity");
        assert!(device.check_read(0, 1, 2).is_err(), "beyond the write pointer");
        device.finish(0);
        assert_eq!(device.append(1, &[2; 2], None, None), Ok(0), "finishing freed the active zone");
    }
}
