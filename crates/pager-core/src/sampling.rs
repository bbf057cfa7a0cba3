//! How often reference sampling looks at a page, decided by what it finds.
//!
//! Reference sampling (`CoreConfig::reference_sampling`) write-protects the pages whose
//! bit the CLOCK hand clears, so the next write faults and marks the page referenced
//! again. Each such fault is a userfaultfd round trip. What a look buys is the pages it
//! finds cold: protected and not written before the hand comes back, they are evicted
//! then. When nearly every page looked at is written before the hand returns (an
//! interpreter writes a reference count on every object it touches), the looks cost a
//! round trip each and find almost nothing.
//!
//! So a referenced page's 16-page granule is looked at once every `period` revolutions
//! of the hand (granules take turns: granule `g` on revolutions where
//! `(g + revolution) % period == 0`); in between its bit stays set and the hand passes
//! it. The period doubles (to `CoreConfig::sampling_period_max`) while most pages
//! looked at come back written, and falls back to 1 at once when fewer than half do: a
//! program's phase that stops writing what it wrote (a sort done, its array now read)
//! leaves cold pages the longer looks would keep for up to `period` revolutions.
//!
//! ```text
//!            written >= 3/4 of those looked at          written >= 3/4
//!   period 1 ------------------------------> period 2 ---------------> ... period max
//!      ▲                                        │                             │
//!      └────────────────────────────────────────┴─────────────────────────────┘
//!                              written < 1/2
//! ```
//!
//! Judged over windows of `WINDOW_PAGES` pages looked at (or fewer, once a revolution
//! ends: a small region's window would otherwise last many revolutions). A period of 1
//! is sampling as it was: every referenced page at every pass.

use crate::fault::SAMPLING_GRANULE_PAGES;

/// Pages looked at between two decisions (a revolution's end decides too).
const WINDOW_PAGES: u64 = 1024;
/// The least a window must hold for a decision at a revolution's end.
const WINDOW_PAGES_MIN: u64 = 256;

#[derive(Debug)]
pub(crate) struct Sampling {
    /// A granule is looked at once every `period` revolutions.
    period: u64,
    period_max: u64,
    /// Revolutions of the hand so far.
    revolutions: u64,
    /// Since the window began: pages write-protected to be looked at, and pages marked
    /// referenced again by a write fault on that protection.
    looked_at: u64,
    written: u64,
    /// The same since the pager started (the core's `sampling_looked_at` and
    /// `sampling_written`).
    looked_at_total: u64,
    written_total: u64,
}

impl Sampling {
    pub(crate) fn new(period_max: u32) -> Sampling {
        assert!(period_max.is_power_of_two(), "a sampling period of at most {period_max}, not a power of two");
        Sampling {
            period: 1,
            period_max: period_max as u64,
            revolutions: 0,
            looked_at: 0,
            written: 0,
            looked_at_total: 0,
            written_total: 0,
        }
    }

    /// Whether the hand, clearing `page`'s bit on this revolution, looks at it.
    pub(crate) fn looks_at(&self, page: u64) -> bool {
        (page / SAMPLING_GRANULE_PAGES + self.revolutions) % self.period == 0
    }

    /// The hand write-protected a page to look at it.
    pub(crate) fn looked_at(&mut self) {
        self.looked_at += 1;
        self.looked_at_total += 1;
        if self.looked_at >= WINDOW_PAGES {
            self.decide();
        }
    }

    /// A write fault marked `pages` pages looked at referenced again.
    pub(crate) fn written(&mut self, pages: u64) {
        self.written += pages;
        self.written_total += pages;
    }

    /// Pages looked at and pages written since the pager started.
    pub(crate) fn totals(&self) -> (u64, u64) {
        (self.looked_at_total, self.written_total)
    }

    /// The hand went past the last region's end.
    pub(crate) fn revolution(&mut self) {
        self.revolutions += 1;
        if self.looked_at >= WINDOW_PAGES_MIN {
            self.decide();
        }
    }

    pub(crate) fn period(&self) -> u64 {
        self.period
    }

    /// The window's outcome sets the period. (Pages looked at in the last window may be
    /// written in this one: the share is capped at all of them.)
    fn decide(&mut self) {
        let (looked_at, written) = (self.looked_at, self.written.min(self.looked_at));
        if written * 4 >= looked_at * 3 {
            self.period = (self.period * 2).min(self.period_max);
        } else if written * 2 < looked_at {
            self.period = 1;
        }
        self.looked_at = 0;
        self.written = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::{Sampling, WINDOW_PAGES};
    use crate::fault::SAMPLING_GRANULE_PAGES;

    /// A window in which `written` of every 100 pages looked at come back written.
    fn window(sampling: &mut Sampling, written: u64) {
        for k in 0..WINDOW_PAGES {
            if k % 100 < written {
                sampling.written(1);
            }
            sampling.looked_at();
        }
    }

    #[test]
    fn the_period_follows_what_the_looks_find() {
        let mut sampling = Sampling::new(8);
        assert_eq!(sampling.period(), 1);
        assert!((0..64).all(|page| sampling.looks_at(page)), "period 1: every page, every revolution");
        window(&mut sampling, 90);
        assert_eq!(sampling.period(), 2, "nearly all written: look half as often");
        for _ in 0..5 {
            window(&mut sampling, 95);
        }
        assert_eq!(sampling.period(), 8, "never past the largest");
        window(&mut sampling, 60);
        assert_eq!(sampling.period(), 8, "between the thresholds: unchanged");
        window(&mut sampling, 20);
        assert_eq!(sampling.period(), 1, "few written: every revolution at once");
        window(&mut sampling, 0);
        assert_eq!(sampling.period(), 1, "never below every revolution");
        let mut never = Sampling::new(1);
        window(&mut never, 100);
        assert_eq!(never.period(), 1, "a largest period of 1: sampling as it was");
    }

    #[test]
    fn each_granule_is_looked_at_once_every_period_revolutions() {
        let mut sampling = Sampling::new(4);
        window(&mut sampling, 100);
        window(&mut sampling, 100);
        assert_eq!(sampling.period(), 4);
        for granule in 0..16u64 {
            let page = granule * SAMPLING_GRANULE_PAGES + 3;
            let mut looks = 0;
            for _ in 0..8 {
                looks += sampling.looks_at(page) as u32;
                assert_eq!(
                    sampling.looks_at(page),
                    sampling.looks_at(granule * SAMPLING_GRANULE_PAGES),
                    "a granule's pages together"
                );
                sampling.revolution();
            }
            assert_eq!(looks, 2, "granule {granule}: twice in 8 revolutions");
        }
    }
}
