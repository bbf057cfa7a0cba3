//! The oracle of one region: what each of its pages may read. Mostly the last version
//! written to it; around the program's discard of a page, also what the discard's
//! window allows (the version from before it, zeroes, a write made between the event
//! and the zap); and whether the program was told the page is lost.

/// A region's pages' expected contents, by page.
pub struct PageOracle {
    /// The last version written to each page (0: never, reads as zeroes).
    last: Vec<u64>,
    /// Pages found poisoned: the program was told (SIGBUS).
    lost: Vec<bool>,
    /// A second version a read may see (after a discard: a write made between the event
    /// and the zap, which the pager may have written out before the zap).
    alt: Vec<Option<u64>>,
    /// While a discard's zap is pending: the version before the discard (a read may
    /// still see it, or zeroes).
    pre: Vec<Option<u64>>,
    /// The last write between a discard's event and its zap, if it landed on a page
    /// mapped since the event (one holding no data from before the discard).
    window_write: Vec<Option<u64>>,
}

impl PageOracle {
    /// A new region's: every page reads zeroes.
    pub fn new(pages: usize) -> PageOracle {
        PageOracle::inherited(vec![0; pages], vec![false; pages])
    }

    /// A forked child's region: the versions it inherits, and the losses the parent
    /// was told of.
    pub fn inherited(last: Vec<u64>, lost: Vec<bool>) -> PageOracle {
        let pages = last.len();
        assert_eq!(lost.len(), pages);
        PageOracle { last, lost, alt: vec![None; pages], pre: vec![None; pages], window_write: vec![None; pages] }
    }

    /// The last version written to `page`.
    pub fn last(&self, page: usize) -> u64 {
        self.last[page]
    }

    pub fn is_lost(&self, page: usize) -> bool {
        self.lost[page]
    }

    /// The program was told `page` is lost.
    pub fn mark_lost(&mut self, page: usize) {
        self.lost[page] = true;
    }

    /// Between a discard's event and its zap.
    pub fn in_window(&self, page: usize) -> bool {
        self.pre[page].is_some()
    }

    /// Whether a read of `page` may see `version`.
    pub fn acceptable(&self, page: usize, version: u64) -> bool {
        version == self.last[page]
            || Some(version) == self.alt[page]
            || self.pre[page].is_some_and(|pre| version == pre || version == 0)
    }

    /// A read saw `version`: outside a discard's window, that is the page's content now.
    pub fn seen(&mut self, page: usize, version: u64) {
        if self.pre[page].is_none() {
            self.last[page] = version;
            self.alt[page] = None;
        }
    }

    /// The program wrote `version` to `page`; `tainted`: over data from before a discard
    /// whose zap has not come yet.
    pub fn written(&mut self, page: usize, version: u64, tainted: bool) {
        self.last[page] = version;
        self.alt[page] = None;
        if self.pre[page].is_some() {
            // Written over data from before the discard, the page is still that data in
            // part: the zap must take it. Written to a page mapped since, it may survive
            // the zap (written out before it).
            self.window_write[page] = (!tainted).then_some(version);
        }
    }

    /// A handler read the REMOVE event of a discard of `page`: its window opens.
    pub fn discard_read(&mut self, page: usize) {
        self.pre[page] = Some(self.last[page]);
        self.window_write[page] = None;
    }

    /// The discard's zap of `page`: it reads zeroes, or a write of the window that
    /// survived the zap.
    pub fn discard_zapped(&mut self, page: usize) {
        self.lost[page] = false;
        self.last[page] = 0;
        self.alt[page] = self.window_write[page].take();
        self.pre[page] = None;
    }

    /// The versions whose loss a poisoned `page` may stand for (after a discard, the
    /// write made before its zap may be what was lost).
    pub fn lost_candidates(&self, page: usize) -> [Option<u64>; 2] {
        [Some(self.last[page]), self.alt[page]]
    }

    /// What a read of `page` would accept now (a fork's child's copy must be one).
    pub fn allowed(&self, page: usize) -> [Option<u64>; 4] {
        [Some(self.last[page]), self.alt[page], self.pre[page], self.pre[page].map(|_| 0)]
    }

    /// No page in a discard's window, none with a second version.
    pub fn settled(&self) -> bool {
        self.pre.iter().all(Option::is_none) && self.alt.iter().all(Option::is_none)
    }
}
