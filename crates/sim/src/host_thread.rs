//! Application threads: bursts of accesses, faults, swap-in reads and their waiters.

use crate::backend::PageId;
use crate::events::Ns;
use crate::host::{Event, Host, Runner};
use crate::memory::{flag, NO_FRAME};

impl Host {
    /// Runs a thread's accesses from `now` until it faults, its burst ends or its
    /// stream ends. Resident accesses cost `access_ns` each and need no event.
    pub(crate) fn run_thread(&mut self, thread: u32, now: Ns) {
        let index = thread as usize;
        if self.threads[index].done {
            let core = self.threads[index].core;
            self.release_core(core, now);
            return;
        }
        let costs = self.costs;
        let limit = now + costs.burst_ns_max;
        let mut local = now;
        loop {
            let step = match self.threads[index].pending.take() {
                Some(step) => step,
                None => match self.threads[index].source.next_step() {
                    Some(step) => step,
                    None => {
                        self.threads[index].done = true;
                        self.threads_running -= 1;
                        self.counters.cpu_app_ns += local - now;
                        self.burst_end(Runner::App(thread), local);
                        return;
                    }
                },
            };
            let page = self.threads[index].first_page + step.page as PageId;
            let flags = self.pages.flags[page as usize];
            if flags & flag::RESIDENT != 0 {
                self.touch(page, step.write, now);
                local += self.access_ns[self.threads[index].tenant as usize];
                self.counters.accesses += 1;
                if step.request_end {
                    let tenant = self.threads[index].tenant as usize;
                    self.counters.requests += 1;
                    self.counters.tenant_requests[tenant] += 1;
                    // Latencies only of real requests (key-value servers), not of every
                    // access of a page stream.
                    let request_ns = self.request_ns[tenant];
                    if request_ns > 0 {
                        local += request_ns;
                        let latency = local - self.threads[index].request_started;
                        self.request_latency.record(latency);
                        self.tenant_request_latency[tenant].record(latency);
                        self.threads[index].request_started = local;
                    }
                }
                if local >= limit {
                    self.counters.cpu_app_ns += local - now;
                    self.burst_end(Runner::App(thread), local);
                    return;
                }
                continue;
            }
            // A fault: the access is retried once it is served.
            self.threads[index].pending = Some(step);
            self.threads[index].fault_started = local;
            let pool = self.threads[index].tenant as usize;
            if flags & flag::READING != 0 {
                self.counters.faults_shared += 1;
                local += costs.fault_swap_in_ns / 4;
            } else if flags & flag::TOUCHED == 0 {
                local += costs.fault_zero_ns;
                if let Some(frame) = self.pools[pool].take(page) {
                    // First touch with a frame at hand: no I/O, the burst goes on.
                    self.pages.frame[page as usize] = frame;
                    self.pages.set(page, flag::RESIDENT);
                    self.counters.faults_zero += 1;
                    self.reclaim_check(pool, now);
                    continue;
                }
            } else {
                local += costs.fault_swap_in_ns;
            }
            let pool_state = &self.pools[pool];
            if pool_state.free.is_empty() && pool_state.free_soon() < pool_state.low && !pool_state.busy {
                // Direct reclaim: this thread frees a batch itself, on its own core.
                let mut victims = std::mem::take(&mut self.threads[index].reclaim);
                self.pools[pool].select_victims(&mut self.pages, self.reclaim_batch, &mut victims);
                let cost = self.reclaim_cost(&victims);
                self.counters.cpu_reclaim_direct_ns += cost;
                local += cost;
                self.threads[index].reclaim = victims;
            }
            self.counters.cpu_app_ns += local - now;
            self.queue.schedule(local, Event::FaultIssue(thread));
            return;
        }
    }

    /// An access to a resident page: CLOCK reference, rescue from reclaim, and for a
    /// write a new version (and the first-write notice the back end asked for).
    pub(crate) fn touch(&mut self, page: PageId, write: bool, now: Ns) {
        let frame = self.pages.frame[page as usize];
        debug_assert_ne!(frame, NO_FRAME);
        let pool = self.pages.tenant(page) as usize;
        self.pools[pool].referenced[frame as usize] = true;
        let flags = self.pages.flags[page as usize];
        if flags & flag::RECLAIM != 0 {
            self.pages.clear(page, flag::RECLAIM);
        }
        if flags & flag::READAHEAD != 0 {
            self.pages.clear(page, flag::READAHEAD);
            self.backend.readahead_hit();
        }
        if !write {
            return;
        }
        let version = &mut self.pages.version[page as usize];
        *version = version.wrapping_add(1).max(1);
        self.pages.set(page, flag::TOUCHED);
        self.pages.clear(page, flag::CLEAN_ON_SWAP);
        if flags & flag::NOTIFY_DIRTY != 0 {
            self.pages.clear(page, flag::NOTIFY_DIRTY);
            self.io.now = now;
            self.backend.dirtied(&mut self.io, page);
            self.process_io(now);
        }
    }

    /// The CPU part of a fault is over: leave the core, submit this thread's direct
    /// reclaim, then get a frame (or wait for one) and start the read.
    pub(crate) fn fault_issue(&mut self, thread: u32, now: Ns) {
        let index = thread as usize;
        let core = self.threads[index].core;
        self.release_core(core, now);
        let pool = self.threads[index].tenant as usize;
        if !self.threads[index].reclaim.is_empty() {
            let victims = std::mem::take(&mut self.threads[index].reclaim);
            self.submit_victims(pool, &victims, core, now);
            let mut victims = victims;
            victims.clear();
            self.threads[index].reclaim = victims;
        }
        self.serve_fault(thread, now);
    }

    /// Serves a thread's pending fault if it can: the page may have arrived meanwhile.
    pub(crate) fn serve_fault(&mut self, thread: u32, now: Ns) {
        let index = thread as usize;
        let step = self.threads[index].pending.expect("a faulting thread has its access");
        let page = self.threads[index].first_page + step.page as PageId;
        let flags = self.pages.flags[page as usize];
        if flags & flag::RESIDENT != 0 {
            self.make_ready(Runner::App(thread), now);
            return;
        }
        if flags & flag::READING != 0 {
            self.read_waiters.add(page, thread);
            return;
        }
        let pool = self.threads[index].tenant as usize;
        match self.pools[pool].take(page) {
            Some(frame) => {
                self.reclaim_check(pool, now);
                self.start_fault_io(thread, page, frame, now);
            }
            None => {
                self.pools[pool].waiters.push_back(thread);
                self.wake_kswapd(now);
            }
        }
    }

    /// With a frame reserved: map a zero page, or start the swap-in read (and
    /// readahead into free frames).
    pub(crate) fn start_fault_io(&mut self, thread: u32, page: PageId, frame: u32, now: Ns) {
        self.pages.frame[page as usize] = frame;
        if !self.pages.has(page, flag::TOUCHED) {
            self.pages.set(page, flag::RESIDENT);
            self.counters.faults_zero += 1;
            self.make_ready(Runner::App(thread), now);
            return;
        }
        self.pages.set(page, flag::READING);
        self.read_waiters.add(page, thread);
        self.counters.faults_major += 1;
        let core = self.threads[thread as usize].core;
        let pool = self.threads[thread as usize].tenant as usize;
        if let Some(throttle) = &mut self.throttles[pool] {
            // blk-throttle holds the read before dispatch (and a throttled tenant reads
            // no further ahead).
            let ready = throttle.read(now, 4096);
            if ready > now {
                self.queue.schedule(ready, Event::ThrottledRead { thread, page });
            } else {
                self.throttled_read(thread, page, now);
            }
            return;
        }
        let mut readahead = std::mem::take(&mut self.readahead);
        readahead.clear();
        self.io.now = now;
        self.threads[thread as usize].read_dispatched = now;
        self.backend.swap_in(&mut self.io, core, page, &mut readahead);
        for &ahead in &readahead {
            let flags = self.pages.flags[ahead as usize];
            let busy = flag::RESIDENT | flag::READING | flag::WRITEBACK;
            if flags & flag::TOUCHED == 0 || flags & busy != 0 || self.pages.tenant(ahead) as usize != pool {
                continue;
            }
            // Readahead never takes the last frames: it must not cause reclaim.
            if self.pools[pool].free.len() as u32 <= self.pools[pool].high {
                break;
            }
            let Some(frame) = self.pools[pool].take(ahead) else { break };
            self.pools[pool].referenced[frame as usize] = false;
            self.pages.frame[ahead as usize] = frame;
            self.pages.set(ahead, flag::READING | flag::READAHEAD);
            self.counters.readahead_pages += 1;
            self.backend.read_ahead(&mut self.io, ahead);
        }
        self.readahead = readahead;
        self.process_io(now);
    }

    /// A swap-in read whose tenant's read budget allows it now.
    pub(crate) fn throttled_read(&mut self, thread: u32, page: PageId, now: Ns) {
        let core = self.threads[thread as usize].core;
        let mut none = std::mem::take(&mut self.readahead);
        self.io.now = now;
        self.threads[thread as usize].read_dispatched = now;
        self.backend.swap_in(&mut self.io, core, page, &mut none);
        none.clear();
        self.readahead = none;
        self.process_io(now);
    }

    /// A read finished: check the data against
    /// the oracle, map the page, wake its waiters.
    pub(crate) fn swap_in_done(&mut self, page: PageId, version: u32, cached: bool, now: Ns) {
        if !self.pages.has(page, flag::READING) {
            self.violation(format!("page {page}: read completion for a page not being read"));
            return;
        }
        self.pages.clear(page, flag::READING);
        self.pages.set(page, flag::RESIDENT | flag::NOTIFY_DIRTY);
        if cached {
            self.pages.set(page, flag::CLEAN_ON_SWAP);
        }
        let expected = self.pages.version[page as usize];
        self.counters.pages_verified += 1;
        if version != expected {
            self.counters.corrupted += 1;
            self.violation(format!("page {page}: swapped in version {version}, last written {expected}"));
        }
        let tenant = self.pages.tenant(page) as usize;
        self.counters.swap_ins += 1;
        self.counters.tenant_swap_in_pages[tenant] += 1;
        let mut woken = std::mem::take(&mut self.woken);
        woken.clear();
        self.read_waiters.take(page, &mut woken);
        for &thread in &woken {
            let latency = now - self.threads[thread as usize].fault_started;
            self.fault_latency.record(latency);
            self.tenant_fault_latency[tenant].record(latency);
            let waiter = &self.threads[thread as usize];
            let dispatched = waiter.read_dispatched;
            let own_read = waiter.pending.is_some_and(|step| waiter.first_page + step.page as PageId == page)
                && dispatched >= waiter.fault_started;
            if own_read {
                // The thread started this read itself (not a shared fault or readahead).
                self.tenant_read_latency[tenant].record(now - dispatched);
            }
            self.make_ready(Runner::App(thread), now);
        }
        let nobody = woken.is_empty();
        self.woken = woken;
        if nobody {
            // Readahead: nobody asked for it yet, so CLOCK may take it first.
            let frame = self.pages.frame[page as usize];
            self.pools[tenant].referenced[frame as usize] = false;
        }
    }
}
