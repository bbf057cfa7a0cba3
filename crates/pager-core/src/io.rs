//! The engine's I/O, as the I/O thread carries it out: swap-out appends read their pages
//! in place, GC reads and moves use the GC move buffer, resets and finishes.

use znswap_core::{Buf, IoError, IoRequest, PageState as EnginePage, SlotAddress};

use crate::{Digest, PagerCore, Seal};

/// Where an append takes one page from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageSource {
    /// A victim page, in place in its region (mapped and write-protected while the
    /// append reads it), or at its shadow page if it was parked; the shell holds
    /// `mappings` so the region stays mapped.
    Region { address: u64 },
    /// Page `page` of the GC move buffer.
    Gc { page: u32 },
    /// The chunk footer: the bytes of `PagerCore::append_records`.
    Footer,
    /// Zeroes: padding, or a victim whose region was freed since (its slot ends invalid
    /// whatever is written).
    Zero,
}

/// One request for the I/O thread, with what it needs outside the lock. Allocated once
/// per I/O thread (`PagerCore::io_plan`).
pub struct IoPlan {
    request: Option<IoRequest>,
    sources: Vec<PageSource>,
    /// For an append, per page: the region page a `Region` source is (owner, region
    /// generation, page), to keep its seal by.
    identities: Vec<(u32, u64, u64)>,
    /// For an append of sealed pages: each page's seal, as the shell sealed it (one per
    /// page; only `Region` sources' are kept).
    seals: Vec<Seal>,
    /// With asynchronous write protection: each page's digest, as the shell took it from
    /// the bytes it wrote (one per page; only `Region` sources' are kept).
    digests: Vec<Digest>,
    gc: bool,
}

impl IoPlan {
    pub fn request(&self) -> IoRequest {
        self.request.expect("an I/O plan holds a request")
    }

    /// For an append: where each of its pages comes from, in slot order.
    pub fn sources(&self) -> &[PageSource] {
        &self.sources
    }

    /// GC work (a GC read or move, a reset), whose CPU time counts as the GC's.
    pub fn is_gc(&self) -> bool {
        self.gc
    }

    /// For an append with sealed pages: whose page source `index` is (to seal it as).
    pub fn identity(&self, index: usize) -> (u32, u64) {
        let (owner, _, page) = self.identities[index];
        (owner, page)
    }

    /// Where the shell leaves each page's seal (one per page of the append, in slot
    /// order; anything for sources other than `Region`).
    pub fn seals_mut(&mut self) -> &mut Vec<Seal> {
        &mut self.seals
    }

    /// Where the shell leaves each page's digest, when asked (`CoreConfig::wp_async`):
    /// of the bytes the append writes, before any sealing; one per page of the append,
    /// in slot order, anything for sources other than `Region`.
    pub fn digests_mut(&mut self) -> &mut Vec<Digest> {
        &mut self.digests
    }
}

/// How a request ended, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoCompletion {
    /// The slot the append's first page landed at, in its zone.
    Append(Result<u32, IoError>),
    Read(Result<(), IoError>),
    Reset(Result<(), IoError>),
    Finish(Result<(), IoError>),
}

impl PagerCore {
    pub fn io_plan(&self) -> IoPlan {
        let append_pages_max = self.append_pages_max();
        IoPlan {
            request: None,
            sources: Vec::with_capacity(append_pages_max),
            identities: Vec::with_capacity(append_pages_max),
            seals: Vec::with_capacity(append_pages_max),
            digests: Vec::with_capacity(append_pages_max),
            gc: false,
        }
    }

    /// The engine's next request, after its clock advanced to `now` (the GC and the
    /// swap-zone flush run on ticks); false when none is queued. For an append, the plan
    /// names each page's source; the records are `append_records`.
    pub fn io_next(&mut self, plan: &mut IoPlan, now: u64) -> bool {
        self.engine.tick(now);
        plan.request = None;
        plan.sources.clear();
        plan.identities.clear();
        plan.seals.clear();
        plan.digests.clear();
        plan.gc = false;
        let Some(request) = self.engine.poll_io() else {
            self.after_engine();
            return false;
        };
        match request {
            IoRequest::Append { io, .. } => {
                for append_page in self.engine.append_pages(io) {
                    let mut identity = (u32::MAX, 0, 0);
                    let source = match append_page.buf {
                        Buf::Page(handle) => {
                            let out = self.out.page(handle);
                            identity = (out.owner, out.generation, out.page);
                            // A page the program discarded during its swap-out (no longer
                            // Writing) completes Dropped: its data is not wanted, and
                            // what is mapped there may be zapped under the read.
                            // (A parked page copied back during its swap-out is `Writing`;
                            // its shadow page stays until the completion.)
                            let writing = || {
                                let state = self.state(out.owner, out.page);
                                state == crate::PageState::Writing
                                    || out.parked && state == crate::PageState::WritingParked
                            };
                            if self.same_region(out.owner, out.generation) && writing() {
                                debug_assert_eq!(out.page, append_page.page);
                                PageSource::Region { address: out.address }
                            } else {
                                self.stats.swap_outs_zeroed += 1;
                                PageSource::Zero
                            }
                        }
                        Buf::Gc(page) => {
                            plan.gc = true;
                            PageSource::Gc { page }
                        }
                        Buf::Footer => PageSource::Footer,
                        Buf::Zero => PageSource::Zero,
                    };
                    plan.sources.push(source);
                    plan.identities.push(identity);
                }
                if !plan.gc && self.stats.first_swap_out_ns == 0 {
                    self.stats.first_swap_out_ns = now.max(1);
                }
            }
            IoRequest::Read { .. } | IoRequest::Reset { .. } => plan.gc = true,
            IoRequest::Finish { .. } => {}
        }
        plan.request = Some(request);
        true
    }

    /// After an append of sealed or digested pages: each page the engine now keeps at the
    /// slot this append wrote it to gets the seal and the digest it was written with.
    /// Checked against the engine rather than assumed: a page dirtied during its
    /// write-out, freed, or written again since keeps those of the copy the engine points
    /// at.
    fn keep_seals(&mut self, plan: &IoPlan, zone: u32, first: u32) {
        let (sealed, digested) = (self.config.encrypt, self.config.wp_async);
        assert!(!sealed || plan.seals.len() == plan.sources.len(), "the shell sealed every page of the append");
        assert!(
            !digested || plan.digests.len() == plan.sources.len(),
            "the shell took every page's digest of the append"
        );
        let capacity = self.engine.config().geometry.zone_capacity_pages;
        for (index, source) in plan.sources.iter().enumerate() {
            let PageSource::Region { .. } = source else { continue };
            let (owner, generation, page) = plan.identities[index];
            if !self.same_region(owner, generation) {
                continue;
            }
            let written = SlotAddress::new(zone, first + index as u32, capacity);
            match self.engine.page_state(owner, page) {
                Ok(EnginePage::Swapped { address } | EnginePage::SwapCached { address }) if address == written => {
                    let region = &mut self.regions[owner as usize];
                    if sealed {
                        region.seals.set(page, plan.seals[index]);
                    }
                    if digested {
                        region.digests.set(page, plan.digests[index]);
                    }
                }
                _ => {}
            }
        }
    }

    /// An append's records: 16 bytes per page for the per-LBA metadata, or the footer
    /// page's bytes.
    pub fn append_records(&self, plan: &IoPlan) -> &[u8] {
        match plan.request() {
            IoRequest::Append { io, .. } => self.engine.append_records(io),
            other => panic!("records of {other:?}, not an append"),
        }
    }

    /// The request of `plan` is done. `records`: for a read, the per-LBA metadata of
    /// each page read (when asked for) or the footer page.
    pub fn io_done(&mut self, plan: &mut IoPlan, completion: IoCompletion, records: &[u8], now: u64) {
        let failed = match (plan.request(), completion) {
            (IoRequest::Append { io, pages, .. }, IoCompletion::Append(result)) => {
                if !plan.gc {
                    self.stats.swap_out_appends += 1;
                    if result.is_ok() {
                        self.stats.swap_outs_written += pages as u64;
                    }
                }
                let dirtied = &self.no_dirtied[..pages as usize];
                self.engine.append_done(io, result, dirtied, now).expect("append completion");
                if let (true, Ok(first), IoRequest::Append { zone, .. }) =
                    (self.config.encrypt || self.config.wp_async, result, plan.request())
                {
                    self.keep_seals(plan, zone, first);
                }
                result.is_err()
            }
            (IoRequest::Read { io, .. }, IoCompletion::Read(result)) => {
                self.engine.read_done(io, result, records, now).expect("read completion");
                result.is_err()
            }
            (IoRequest::Reset { io, .. }, IoCompletion::Reset(result)) => {
                self.engine.reset_done(io, result, now).expect("reset completion");
                result.is_err()
            }
            (IoRequest::Finish { io, .. }, IoCompletion::Finish(result)) => {
                self.engine.finish_done(io, result, now).expect("finish completion");
                result.is_err()
            }
            (request, completion) => panic!("{completion:?} does not complete {request:?}"),
        };
        self.stats.device_errors += failed as u64;
        plan.request = None;
        self.after_engine();
        self.assert_counts();
    }
}
