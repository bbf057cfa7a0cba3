//! I/O requests the engine emits and the descriptor table behind them.
//!
//! Every request in flight holds one descriptor from a table sized at start-up
//! (`io_in_flight_max`); when it is exhausted the engine applies backpressure instead of
//! allocating. A request's page list and record bytes live in its descriptor: the driver
//! reads them with `Engine::append_pages` / `Engine::append_records`.

use serde::Serialize;

/// Names one request in flight. Stale or unknown ids are refused on completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct IoId(pub u64);

impl IoId {
    pub(crate) fn new(index: u32, sequence: u32) -> IoId {
        IoId((sequence as u64) << 32 | index as u64)
    }

    pub(crate) fn index(self) -> u32 {
        self.0 as u32
    }

    pub(crate) fn sequence(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// A page buffer, by name: the driver owns the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Buf {
    /// The driver's own buffer handle, as given to `swap_out`.
    Page(u64),
    /// Page `n` of the GC move buffer (`Engine::gc_buffer_pages` pages, preallocated by
    /// the driver).
    Gc(u32),
    /// The chunk footer: append the bytes of `Engine::append_records`; on a read,
    /// hand the page back in `read_done`'s `records`.
    Footer,
    /// Padding of a chunk flushed before it filled: write zeros.
    Zero,
}

/// One page of an Append.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AppendPage {
    pub owner: u32,
    pub page: u64,
    pub buf: Buf,
}

/// What the engine asks the driver to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum IoRequest {
    /// Zone-append `pages` pages (`Engine::append_pages(io)`) to `zone`, with the
    /// records of `Engine::append_records(io)`: in per-page mode 16 bytes per page for
    /// the per-LBA metadata (pad with zeros to the format's size); in footer mode the
    /// footer page's 4096 bytes (the page whose buf is `Buf::Footer`). Complete with
    /// `Engine::append_done`.
    Append { io: IoId, zone: u32, pages: u32 },
    /// Read `pages` slots from `zone` starting at `slot` into `buf` (consecutive GC
    /// buffer pages for `Buf::Gc`; a GC read may span unoccupied slots). With `with_metadata`, return the per-LBA metadata of each
    /// page (metadata_bytes each) in `read_done`'s `records`; for `Buf::Footer`, return
    /// the page itself there. Complete with `Engine::read_done`.
    Read { io: IoId, zone: u32, slot: u32, pages: u32, buf: Buf, with_metadata: bool },
    /// Reset the zone. Complete with `Engine::reset_done`.
    Reset { io: IoId, zone: u32 },
    /// Finish the zone (after an append error its write pointer is unknown; finishing
    /// also gives back its active resource). Complete with `Engine::finish_done`.
    Finish { io: IoId, zone: u32 },
}

impl IoRequest {
    pub fn io(&self) -> IoId {
        match *self {
            IoRequest::Append { io, .. }
            | IoRequest::Read { io, .. }
            | IoRequest::Reset { io, .. }
            | IoRequest::Finish { io, .. } => io,
        }
    }

    pub fn zone(&self) -> u32 {
        match *self {
            IoRequest::Append { zone, .. }
            | IoRequest::Read { zone, .. }
            | IoRequest::Reset { zone, .. }
            | IoRequest::Finish { zone, .. } => zone,
        }
    }
}

/// A device error as the driver reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, Serialize)]
#[non_exhaustive]
pub enum IoError {
    #[error("device I/O error")]
    Device,
    #[error("zone is offline")]
    Offline,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IoKind {
    Free,
    /// Append from swap-zone `swap_zone`; GC appends carry the source slots as tags.
    Append {
        swap_zone: u32,
        gc: bool,
    },
    /// A swap-in read of `owner`'s `page`; `orphaned` once the page left SwapInFlight
    /// without it (freed, or its zone went offline): its completion must then not touch
    /// the page, whose next swap-in read may be in flight by then.
    SwapInRead {
        owner: u32,
        page: u64,
        orphaned: bool,
    },
    /// GC data read of batch entries `first .. end` (the gaps between them read along).
    GcRead {
        first: u32,
        end: u32,
    },
    /// GC footer read; the footer sits at `slot`.
    FooterRead,
    Reset,
    Finish,
}

/// One entry of the I/O table: a request in flight (or an append still gathering pages)
/// and what its completion needs.
pub(crate) struct IoDescriptor {
    pub sequence: u32,
    pub kind: IoKind,
    pub zone: u32,
    /// A read's first slot in `zone`.
    pub slot: u32,
    pub pages_count: u32,
    /// Zone generation the request was made in.
    pub generation: u32,
    pub pages: Vec<AppendPage>,
    /// Per page: swap-out ticket, or the GC source slot address.
    pub tags: Vec<u64>,
    pub records: Vec<u8>,
}

pub(crate) struct IoTable {
    descriptors: Vec<IoDescriptor>,
    free: Vec<u32>,
}

impl IoTable {
    pub fn new(count: u32, pages_max: u32, record_bytes_max: usize) -> IoTable {
        let descriptors = (0..count)
            .map(|_| IoDescriptor {
                sequence: 0,
                kind: IoKind::Free,
                zone: 0,
                slot: 0,
                pages_count: 0,
                generation: 0,
                pages: Vec::with_capacity(pages_max as usize),
                tags: Vec::with_capacity(pages_max as usize),
                records: Vec::with_capacity(record_bytes_max),
            })
            .collect();
        IoTable { descriptors, free: (0..count).rev().collect() }
    }

    pub fn in_flight(&self) -> u32 {
        (self.descriptors.len() - self.free.len()) as u32
    }

    pub fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    pub fn allocate(&mut self, kind: IoKind, zone: u32, generation: u32) -> Option<IoId> {
        let index = self.free.pop()?;
        let descriptor = &mut self.descriptors[index as usize];
        assert_eq!(descriptor.kind, IoKind::Free);
        descriptor.sequence = descriptor.sequence.wrapping_add(1);
        descriptor.kind = kind;
        descriptor.zone = zone;
        descriptor.slot = 0;
        descriptor.pages_count = 0;
        descriptor.generation = generation;
        descriptor.pages.clear();
        descriptor.tags.clear();
        descriptor.records.clear();
        Some(IoId::new(index, descriptor.sequence))
    }

    pub fn get(&self, io: IoId) -> Option<&IoDescriptor> {
        let descriptor = self.descriptors.get(io.index() as usize)?;
        (descriptor.kind != IoKind::Free && descriptor.sequence == io.sequence()).then_some(descriptor)
    }

    pub fn get_mut(&mut self, io: IoId) -> Option<&mut IoDescriptor> {
        let descriptor = self.descriptors.get_mut(io.index() as usize)?;
        (descriptor.kind != IoKind::Free && descriptor.sequence == io.sequence()).then_some(descriptor)
    }

    /// Whether an I/O in flight (or an append still gathering pages) names `owner`: a
    /// swap-out or GC move in an append, or a swap-in read.
    pub fn names_owner(&self, owner: u32) -> bool {
        self.descriptors.iter().any(|descriptor| match descriptor.kind {
            IoKind::Append { .. } => descriptor.pages.iter().any(|page| page.owner == owner),
            IoKind::SwapInRead { owner: reading, orphaned: false, .. } => reading == owner,
            _ => false,
        })
    }

    /// Marks the swap-in read of `owner`'s `page` orphaned (see `IoKind::SwapInRead`).
    /// A scan: only for the rare ways a page leaves SwapInFlight without its read.
    pub fn orphan_swap_in(&mut self, owner: u32, page: u64) {
        for descriptor in &mut self.descriptors {
            if let IoKind::SwapInRead { owner: o, page: p, orphaned } = &mut descriptor.kind {
                if *o == owner && *p == page {
                    *orphaned = true;
                }
            }
        }
    }

    pub fn release(&mut self, io: IoId) {
        let descriptor = &mut self.descriptors[io.index() as usize];
        assert_ne!(descriptor.kind, IoKind::Free);
        assert_eq!(descriptor.sequence, io.sequence());
        descriptor.kind = IoKind::Free;
        self.free.push(io.index());
    }
}
