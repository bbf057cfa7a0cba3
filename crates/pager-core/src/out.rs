//! Out handles: one per page between its pick as a victim and its swap-out's completion.
//! The engine names a swapped-out page's buffer by its handle (`Buf::Page`), and the
//! handle names where the append reads the page. Their number is fixed at start-up, so
//! it bounds the pages on their way out.

/// A page on its way to the device: the append reads it at `address` (its own, or its
/// shadow page's when `parked`) if its region (`owner`, `generation`) is still the one
/// mapped there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OutPage {
    pub(crate) owner: u32,
    pub(crate) generation: u64,
    pub(crate) page: u64,
    pub(crate) address: u64,
    pub(crate) parked: bool,
}

/// Every out handle: free, held by a victim between its pick and its hand-over, or
/// writing (its page handed to the engine, its swap-out not yet complete).
pub(crate) struct OutPages {
    /// Free handles. A victim takes one when picked; it comes back with the page's
    /// `SwapOutDone`, or when the page stays resident.
    free: Vec<u64>,
    pages: Vec<OutPage>,
    /// Handles held by victims between their pick and their hand-over.
    evicting: u64,
    /// Pages handed to the engine and not yet completed: resident, but on their way out,
    /// so the evictor does not count them as pressure.
    writing: u64,
}

impl OutPages {
    pub(crate) fn new(count: usize) -> OutPages {
        OutPages {
            free: (0..count as u64).rev().collect(),
            pages: vec![OutPage { owner: 0, generation: 0, page: 0, address: 0, parked: false }; count],
            evicting: 0,
            writing: 0,
        }
    }

    /// How many handles there are.
    pub(crate) fn len(&self) -> usize {
        self.pages.len()
    }

    /// How many are free.
    pub(crate) fn free(&self) -> usize {
        self.free.len()
    }

    /// Handles held by victims between their pick and their hand-over.
    pub(crate) fn evicting(&self) -> u64 {
        self.evicting
    }

    /// Pages handed to the engine whose swap-outs are not complete.
    pub(crate) fn writing(&self) -> u64 {
        self.writing
    }

    /// A free handle, if any.
    pub(crate) fn take(&mut self) -> Option<u64> {
        self.free.pop()
    }

    /// A handle taken and not used goes back.
    pub(crate) fn give_back(&mut self, handle: u64) {
        self.free.push(handle);
    }

    /// A handle for a victim picked, held until its hand-over (`victim_handed_over`).
    pub(crate) fn take_for_victim(&mut self) -> u64 {
        let handle = self.free.pop().expect("no more victims than free handles");
        self.evicting += 1;
        handle
    }

    /// A victim holding a handle was handed over: the handle is the hand-over's, to
    /// give back or to write with.
    pub(crate) fn victim_handed_over(&mut self) {
        self.evicting -= 1;
    }

    /// `handle`'s page is handed to the engine, to be read at `out`.
    pub(crate) fn writing_started(&mut self, handle: u64, out: OutPage) {
        self.pages[handle as usize] = out;
        self.writing += 1;
    }

    /// The page `handle` names, set when its write was asked.
    pub(crate) fn page(&self, handle: u64) -> OutPage {
        self.pages[handle as usize]
    }

    /// `handle`'s swap-out completed: no append reads its page any more.
    pub(crate) fn writing_done(&mut self, handle: u64) -> OutPage {
        self.free.push(handle);
        self.writing -= 1;
        self.pages[handle as usize]
    }

    /// Every handle is free, a victim's or writing.
    pub(crate) fn check(&self) {
        assert_eq!(
            self.free.len() as u64 + self.evicting + self.writing,
            self.pages.len() as u64,
            "out handles: free + held by victims + in flight"
        );
    }
}
