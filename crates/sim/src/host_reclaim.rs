//! Reclaim (kswapd and direct), swap-out submission, frames freed, back-end notices.

use crate::backend::{Notice, PageId, SwapOutStart};
use crate::events::{Ns, MICROSECOND_NS};
use crate::host::{Event, Host, Runner};
use crate::memory::{flag, NO_FRAME};

/// Backpressure retry delay: a GC batch or a device write takes about this long.
const RETRY_NS: Ns = 200 * MICROSECOND_NS;

impl Host {
    pub(crate) fn wake_kswapd(&mut self, now: Ns) {
        if !self.kswapd.awake {
            self.kswapd.awake = true;
            self.make_ready(Runner::Kswapd, now);
        }
    }

    /// After a frame is taken: below the low watermark, kswapd wakes.
    pub(crate) fn reclaim_check(&mut self, pool: usize, now: Ns) {
        if self.pools[pool].needs_reclaim() {
            self.wake_kswapd(now);
        }
    }

    /// CPU cost of reclaiming these pages (a clean copy on swap needs no write).
    pub(crate) fn reclaim_cost(&self, victims: &[PageId]) -> Ns {
        victims
            .iter()
            .map(|&page| {
                let flags = self.pages.flags[page as usize];
                if flags & flag::CLEAN_ON_SWAP != 0 || flags & flag::TOUCHED == 0 {
                    self.costs.swap_out_clean_ns
                } else {
                    self.costs.swap_out_ns
                }
            })
            .sum()
    }

    /// kswapd: submits the batch whose CPU work just ended, then picks the next one
    /// from the pool furthest below its high watermark; sleeps when all are above.
    pub(crate) fn run_kswapd(&mut self, now: Ns) {
        let core = self.kswapd.core;
        if !self.kswapd.victims.is_empty() {
            let victims = std::mem::take(&mut self.kswapd.victims);
            self.submit_victims(self.kswapd.victims_pool, &victims, core, now);
            let mut victims = victims;
            victims.clear();
            self.kswapd.victims = victims;
        }
        let neediest = (0..self.pools.len())
            .map(|pool| (self.pools[pool].reclaim_wanted(), pool))
            .filter(|&(wanted, _)| wanted > 0)
            .max_by_key(|&(wanted, pool)| (wanted, std::cmp::Reverse(pool)));
        let Some((wanted, pool)) = neediest else {
            self.kswapd.awake = false;
            self.release_core(core, now);
            return;
        };
        let mut victims = std::mem::take(&mut self.kswapd.victims);
        let batch = wanted.min(self.reclaim_batch);
        self.pools[pool].select_victims(&mut self.pages, batch, &mut victims);
        if victims.is_empty() {
            // Everything is pinned or in flight: look again after completions.
            self.kswapd.victims = victims;
            self.kswapd.awake = false;
            self.release_core(core, now);
            self.schedule_retry(now);
            return;
        }
        let cost = self.reclaim_cost(&victims);
        self.counters.cpu_kswapd_ns += cost;
        self.kswapd.victims = victims;
        self.kswapd.victims_pool = pool;
        self.burst_end(Runner::Kswapd, now + cost);
    }

    pub(crate) fn schedule_retry(&mut self, now: Ns) {
        if !self.retry_scheduled {
            self.retry_scheduled = true;
            self.queue.schedule(now + RETRY_NS, Event::Retry);
        }
    }

    pub(crate) fn retry(&mut self, now: Ns) {
        self.retry_scheduled = false;
        for pool in &mut self.pools {
            pool.busy = false;
        }
        if self.pools.iter().any(|pool| pool.needs_reclaim() || !pool.waiters.is_empty()) {
            self.wake_kswapd(now);
        }
    }

    /// Hands picked pages to the back end (pages rescued meanwhile stay). Pages never
    /// written are dropped without I/O: they are still zero.
    pub(crate) fn submit_victims(&mut self, pool: usize, victims: &[PageId], core: u32, now: Ns) {
        self.io.now = now;
        let mut dropped = Vec::new();
        for &page in victims {
            self.pools[pool].reclaiming -= 1;
            if !self.pages.has(page, flag::RECLAIM) {
                continue;
            }
            self.pages.clear(page, flag::RECLAIM);
            if self.pools[pool].busy {
                continue;
            }
            if !self.pages.has(page, flag::TOUCHED) {
                dropped.push(page);
                continue;
            }
            let clean = self.pages.has(page, flag::CLEAN_ON_SWAP);
            if let (Some(throttle), false) = (&mut self.throttles[pool], clean) {
                // blk-throttle holds the write before dispatch; the page stays pinned.
                let ready = throttle.write(now, 4096);
                if ready > now {
                    self.pages.set(page, flag::WRITEBACK);
                    self.pools[pool].writeback += 1;
                    self.deferred_writes.insert(page);
                    self.queue.schedule(ready, Event::ThrottledWrite(page));
                    continue;
                }
            }
            let version = self.pages.version[page as usize];
            match self.backend.swap_out(&mut self.io, core, page, version) {
                SwapOutStart::Started => {
                    self.pages.set(page, flag::WRITEBACK | flag::NOTIFY_DIRTY);
                    self.pools[pool].writeback += 1;
                }
                SwapOutStart::Busy => {
                    self.pools[pool].busy = true;
                    self.counters.backpressure += 1;
                    self.schedule_retry(now);
                }
            }
        }
        self.backend.flush(&mut self.io);
        self.process_io(now);
        for page in dropped {
            self.unmap(page, now);
        }
    }

    /// Drops a page's frame (its data is on swap, or it is a zero page).
    fn unmap(&mut self, page: PageId, now: Ns) {
        let frame = self.pages.frame[page as usize];
        assert_ne!(frame, NO_FRAME, "page {page} unmapped without a frame");
        self.pages.frame[page as usize] = NO_FRAME;
        self.pages.clear(page, flag::RESIDENT | flag::NOTIFY_DIRTY | flag::CLEAN_ON_SWAP | flag::READAHEAD);
        let pool = self.pages.tenant(page) as usize;
        self.release_frame(pool, frame, now);
    }

    /// A frame is free: the first waiter whose fault still needs one gets it.
    pub(crate) fn release_frame(&mut self, pool: usize, frame: u32, now: Ns) {
        while let Some(thread) = self.pools[pool].waiters.pop_front() {
            let index = thread as usize;
            let step = self.threads[index].pending.expect("a waiting thread has its access");
            let page = self.threads[index].first_page + step.page as PageId;
            let flags = self.pages.flags[page as usize];
            if flags & flag::RESIDENT != 0 {
                self.make_ready(Runner::App(thread), now);
                continue;
            }
            if flags & flag::READING != 0 {
                self.read_waiters.add(page, thread);
                continue;
            }
            self.pools[pool].hand_over(frame, page);
            self.start_fault_io(thread, page, frame, now);
            return;
        }
        self.pools[pool].put(frame);
    }

    pub(crate) fn notice(&mut self, notice: Notice, now: Ns) {
        match notice {
            Notice::SwapOutDone { page, swapped, written } => self.swap_out_done(page, swapped, written, now),
            Notice::SwapInDone { page, version, cached } => self.swap_in_done(page, version, cached, now),
            Notice::Ready => self.retry(now),
        }
    }

    /// A swap-out held back by the tenant's write limit goes to the back end now.
    pub(crate) fn throttled_write(&mut self, page: PageId, now: Ns) {
        if !self.deferred_writes.remove(&page) {
            return;
        }
        let pool = self.pages.tenant(page) as usize;
        self.io.now = now;
        let version = self.pages.version[page as usize];
        match self.backend.swap_out(&mut self.io, 0, page, version) {
            SwapOutStart::Started => self.pages.set(page, flag::NOTIFY_DIRTY),
            SwapOutStart::Busy => {
                self.pages.clear(page, flag::WRITEBACK);
                self.pools[pool].writeback -= 1;
                self.pools[pool].busy = true;
                self.counters.backpressure += 1;
                self.schedule_retry(now);
            }
        }
        self.backend.flush(&mut self.io);
        self.process_io(now);
    }

    fn swap_out_done(&mut self, page: PageId, swapped: bool, written: bool, now: Ns) {
        if !self.pages.has(page, flag::WRITEBACK) {
            self.violation(format!("page {page}: swap-out completion without a swap-out"));
            return;
        }
        self.pages.clear(page, flag::WRITEBACK);
        let tenant = self.pages.tenant(page) as usize;
        self.pools[tenant].writeback -= 1;
        if written {
            self.counters.swap_out_writes += 1;
            self.counters.tenant_swap_out_pages[tenant] += 1;
        } else if swapped {
            self.counters.swap_out_clean += 1;
        }
        if swapped {
            self.unmap(page, now);
        } else {
            self.counters.swap_outs_aborted += 1;
        }
    }
}
