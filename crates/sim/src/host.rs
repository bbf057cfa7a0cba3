//! The virtual host: cores, application threads, kernel threads (kswapd, ZNGC, the
//! discard worker), memory pools with CLOCK reclaim, and the event loop that drives a
//! swap back end.
//!
//! Threads run on `cpus` cores from one run queue. A thread runs its access stream in
//! bursts of at most `burst_ns_max` of CPU; an access to a resident page costs
//! `access_ns`, a fault costs the fault's CPU and then blocks the thread until its read
//! completes (or a frame frees). Reclaim is CLOCK over each tenant's pool: kswapd
//! tops the pool up between its watermarks in the background; a faulting thread that
//! finds no frame and not enough on the way reclaims a batch itself (direct reclaim),
//! paying the CPU. A page picked for reclaim stays mapped while its CPU work runs (an
//! access rescues it) and while its write is in flight (Appendix A: a write during
//! the swap-out aborts it).
//!
//! The files `host_thread.rs` (application threads and faults) and `host_reclaim.rs`
//! (reclaim, back-end notices) hold the rest of `Host`'s methods.

use std::collections::VecDeque;

use serde::Serialize;

use crate::backend::{Backend, Io, KernelThread, PageId, KERNEL_THREADS};
use crate::calib::CpuCosts;
use crate::events::{EventQueue, Ns, MILLISECOND_NS};
use crate::memory::{PageTable, Pool};
use crate::metrics::{Histogram, Sample};
use crate::source::{Source, Step};
use crate::throttle::Throttle;

/// Who runs on a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Runner {
    App(u32),
    Kswapd,
    Kernel(usize),
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    /// A runner holding a core goes on.
    Run(Runner),
    /// A runner's burst ended with others waiting: it goes to the back of the queue.
    Yield(Runner),
    /// A thread's fault CPU work is done: it leaves its core and waits for I/O.
    FaultIssue(u32),
    /// A back-end completion.
    Backend(u64),
    /// A thread's swap-in read, held back by its tenant's read limit, may go.
    ThrottledRead {
        thread: u32,
        page: PageId,
    },
    /// A page's swap-out write, held back by its tenant's write limit, may go.
    ThrottledWrite(PageId),
    Tick,
    Sample,
    /// Reclaim may try the back end again after backpressure.
    Retry,
}

pub(crate) struct Thread {
    pub tenant: u16,
    /// First page of the thread's range (its slice, or the shared region).
    pub first_page: PageId,
    pub source: Box<dyn Source>,
    /// The access that faulted, retried once the fault is served.
    pub pending: Option<Step>,
    pub core: u32,
    pub fault_started: Ns,
    /// When this thread's own swap-in read left blk-throttle for the device.
    pub read_dispatched: Ns,
    pub request_started: Ns,
    /// Victims of this thread's direct reclaim, submitted when its CPU work ends.
    pub reclaim: Vec<PageId>,
    pub done: bool,
}

#[derive(Default)]
pub(crate) struct KernelState {
    pub backlog_ns: Ns,
    pub awake: bool,
    pub core: u32,
}

pub(crate) struct Kswapd {
    pub awake: bool,
    pub core: u32,
    pub victims: Vec<PageId>,
    pub victims_pool: usize,
}

/// Monotonic counters of the host, per run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostCounters {
    pub accesses: u64,
    pub requests: u64,
    pub faults_zero: u64,
    pub faults_major: u64,
    /// Faults on a page another thread (or readahead) was already reading.
    pub faults_shared: u64,
    /// Swap-outs that wrote the page.
    pub swap_out_writes: u64,
    /// Reclaimed pages whose clean copy was still on swap (no write).
    pub swap_out_clean: u64,
    /// Swap-outs aborted: written to during the write, or refused.
    pub swap_outs_aborted: u64,
    pub swap_ins: u64,
    pub readahead_pages: u64,
    pub tenant_swap_in_pages: Vec<u64>,
    pub tenant_swap_out_pages: Vec<u64>,
    pub tenant_requests: Vec<u64>,
    pub cpu_app_ns: Ns,
    pub cpu_reclaim_direct_ns: Ns,
    pub cpu_kswapd_ns: Ns,
    pub cpu_gc_ns: Ns,
    pub cpu_discard_ns: Ns,
    pub tenant_gc_cpu_ns: Vec<Ns>,
    /// Swap-ins checked against the oracle.
    pub pages_verified: u64,
    /// Swap-ins that returned anything but the last version written.
    pub corrupted: u64,
    pub backpressure: u64,
}

/// How the host is built: cores, costs, tenants.
pub struct HostSetup {
    pub cpus: u32,
    pub costs: CpuCosts,
    /// Pages reclaimed per batch (Linux `SWAP_CLUSTER_MAX`).
    pub reclaim_batch: u32,
    pub tenants: Vec<TenantSetup>,
    /// Interval of the time series.
    pub sample_ns: Ns,
    /// Virtual time the host starts at (after the device's preconditioning).
    pub start_ns: Ns,
}

pub struct TenantSetup {
    /// Pages of the tenant's region.
    pub pages: u64,
    pub memory_pages: u32,
    /// One source per thread, with the first page of its range within the region.
    pub threads: Vec<(u64, Box<dyn Source>)>,
    pub throttle: Option<Throttle>,
    /// CPU per request besides its accesses (a key-value server's request handling).
    pub request_ns: Ns,
    /// CPU per access of this tenant's threads (`CpuCosts::access_ns` unless the
    /// benchmark does more per access).
    pub access_ns: Ns,
}

pub struct Host {
    pub(crate) costs: CpuCosts,
    pub(crate) reclaim_batch: u32,
    pub(crate) queue: EventQueue<Event>,
    pub(crate) pages: PageTable,
    pub(crate) pools: Vec<Pool>,
    pub(crate) threads: Vec<Thread>,
    pub(crate) idle_cores: Vec<u32>,
    pub(crate) run_queue: VecDeque<Runner>,
    pub(crate) kswapd: Kswapd,
    pub(crate) kernel: [KernelState; KERNEL_THREADS],
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) io: Io,
    /// Reads in flight and the threads waiting for them.
    pub(crate) read_waiters: crate::memory::ReadWaiters,
    pub(crate) woken: Vec<u32>,
    pub(crate) throttles: Vec<Option<Throttle>>,
    /// Swap-outs waiting for their tenant's write budget (flag WRITEBACK already set).
    pub(crate) deferred_writes:
        std::collections::HashSet<PageId, std::hash::BuildHasherDefault<crate::memory::PageHasher>>,
    pub(crate) request_ns: Vec<Ns>,
    pub(crate) access_ns: Vec<Ns>,
    pub(crate) readahead: Vec<PageId>,
    pub(crate) retry_scheduled: bool,
    pub counters: HostCounters,
    pub fault_latency: Histogram,
    /// Per tenant, major fault latency (throttle wait included: what the thread sees).
    pub tenant_fault_latency: Vec<Histogram>,
    /// Per tenant, swap-in read latency at the device: from dispatch (after
    /// blk-throttle) to completion, of the reads a faulting thread started itself.
    pub tenant_read_latency: Vec<Histogram>,
    pub request_latency: Histogram,
    pub tenant_request_latency: Vec<Histogram>,
    pub series: Vec<Sample>,
    pub(crate) sample_ns: Ns,
    pub(crate) last_sample: (Ns, HostCounters, crate::backend::BackendCounters, Vec<u64>),
    pub(crate) last_gc_bytes: Vec<u64>,
    pub violations: Vec<String>,
    pub(crate) threads_running: u32,
    pub(crate) start_ns: Ns,
    /// A spare notice buffer, swapped with `io.notices` while those are handled.
    pub(crate) notice_spare: Vec<crate::backend::Notice>,
}

const VIOLATIONS_MAX: usize = 32;

impl Host {
    pub fn new(setup: HostSetup, backend: Box<dyn Backend>) -> Host {
        assert!(setup.cpus >= 1, "at least one core");
        assert!(!setup.tenants.is_empty(), "at least one tenant");
        let tenants = setup.tenants.len();
        let mut regions = Vec::new();
        let mut first: u64 = 0;
        for (index, tenant) in setup.tenants.iter().enumerate() {
            regions.push((first as PageId, tenant.pages as PageId, index as u16));
            first += tenant.pages;
        }
        assert!(first < PageId::MAX as u64, "{first} pages do not fit page ids");
        let mut threads = Vec::new();
        let mut pools = Vec::new();
        let mut throttles = Vec::new();
        let mut request_ns = Vec::new();
        let mut access_ns = Vec::new();
        for (index, tenant) in setup.tenants.into_iter().enumerate() {
            pools.push(Pool::new(tenant.memory_pages));
            request_ns.push(tenant.request_ns);
            access_ns.push(tenant.access_ns);
            throttles.push(tenant.throttle);
            let region_first = regions[index].0;
            for (offset, source) in tenant.threads {
                assert!(offset < tenant.pages, "thread range starts outside its region");
                threads.push(Thread {
                    tenant: index as u16,
                    first_page: region_first + offset as PageId,
                    source,
                    pending: None,
                    core: 0,
                    fault_started: 0,
                    read_dispatched: 0,
                    request_started: 0,
                    reclaim: Vec::new(),
                    done: false,
                });
            }
        }
        let counters = HostCounters {
            tenant_swap_in_pages: vec![0; tenants],
            tenant_swap_out_pages: vec![0; tenants],
            tenant_requests: vec![0; tenants],
            tenant_gc_cpu_ns: vec![0; tenants],
            ..HostCounters::default()
        };
        let backend_counters = backend.counters();
        let start = setup.start_ns;
        let mut host = Host {
            costs: setup.costs,
            reclaim_batch: setup.reclaim_batch.max(1),
            queue: EventQueue::new(),
            pages: PageTable::new(&regions),
            pools,
            threads_running: threads.len() as u32,
            threads,
            idle_cores: (0..setup.cpus).rev().collect(),
            run_queue: VecDeque::new(),
            kswapd: Kswapd { awake: false, core: 0, victims: Vec::new(), victims_pool: 0 },
            kernel: Default::default(),
            backend,
            io: Io::new(tenants),
            read_waiters: Default::default(),
            woken: Vec::new(),
            throttles,
            deferred_writes: Default::default(),
            request_ns,
            access_ns,
            readahead: Vec::new(),
            retry_scheduled: false,
            last_sample: (start, counters.clone(), backend_counters, vec![0; tenants]),
            start_ns: start,
            notice_spare: Vec::with_capacity(256),
            counters,
            fault_latency: Histogram::new(),
            tenant_fault_latency: vec![Histogram::new(); tenants],
            tenant_read_latency: vec![Histogram::new(); tenants],
            request_latency: Histogram::new(),
            tenant_request_latency: vec![Histogram::new(); tenants],
            series: Vec::new(),
            sample_ns: setup.sample_ns.max(MILLISECOND_NS),
            last_gc_bytes: vec![0; tenants],
            violations: Vec::new(),
        };
        for thread in 0..host.threads.len() as u32 {
            host.make_ready(Runner::App(thread), start);
        }
        host.queue.schedule(start + MILLISECOND_NS, Event::Tick);
        host.queue.schedule(start + host.sample_ns, Event::Sample);
        host
    }

    pub fn now(&self) -> Ns {
        self.queue.now()
    }

    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    pub fn backend_mut(&mut self) -> &mut dyn Backend {
        &mut *self.backend
    }

    pub fn tenants(&self) -> usize {
        self.pools.len()
    }

    /// Application threads that have not finished their streams.
    pub fn threads_running(&self) -> u32 {
        self.threads_running
    }

    pub(crate) fn violation(&mut self, message: String) {
        if self.violations.len() < VIOLATIONS_MAX {
            self.violations.push(message);
        }
    }

    /// Runs events until `stop` says so (checked every millisecond of virtual time),
    /// the time limit passes, or nothing is left to do.
    pub fn run_until(&mut self, deadline: Ns, mut stop: impl FnMut(&Host) -> bool) {
        while let Some((now, event)) = self.queue.pop() {
            if now > deadline {
                // Put it back: a later phase goes on from here.
                self.queue.schedule(now, event);
                return;
            }
            match event {
                Event::Run(runner) => self.run(runner, now),
                Event::Yield(runner) => self.yield_core(runner, now),
                Event::FaultIssue(thread) => self.fault_issue(thread, now),
                Event::Backend(token) => {
                    self.io.now = now;
                    self.backend.complete(&mut self.io, token);
                    self.process_io(now);
                }
                Event::ThrottledRead { thread, page } => self.throttled_read(thread, page, now),
                Event::ThrottledWrite(page) => self.throttled_write(page, now),
                Event::Retry => self.retry(now),
                Event::Tick => {
                    self.tick(now);
                    if stop(self) {
                        return;
                    }
                }
                Event::Sample => self.sample(now),
            }
        }
    }

    // ------------------------------------------------------------------ cores

    pub(crate) fn make_ready(&mut self, runner: Runner, now: Ns) {
        match self.idle_cores.pop() {
            Some(core) => self.start(runner, core, now),
            None => self.run_queue.push_back(runner),
        }
    }

    fn start(&mut self, runner: Runner, core: u32, now: Ns) {
        match runner {
            Runner::App(thread) => self.threads[thread as usize].core = core,
            Runner::Kswapd => self.kswapd.core = core,
            Runner::Kernel(kind) => self.kernel[kind].core = core,
        }
        self.queue.schedule(now, Event::Run(runner));
    }

    pub(crate) fn release_core(&mut self, core: u32, now: Ns) {
        match self.run_queue.pop_front() {
            Some(runner) => self.start(runner, core, now),
            None => self.idle_cores.push(core),
        }
    }

    fn core_of(&self, runner: Runner) -> u32 {
        match runner {
            Runner::App(thread) => self.threads[thread as usize].core,
            Runner::Kswapd => self.kswapd.core,
            Runner::Kernel(kind) => self.kernel[kind].core,
        }
    }

    /// Ends a burst at `at`: keep the core if nobody waits, else queue behind them.
    pub(crate) fn burst_end(&mut self, runner: Runner, at: Ns) {
        self.queue.schedule(at, Event::Yield(runner));
    }

    fn yield_core(&mut self, runner: Runner, now: Ns) {
        if let Runner::App(thread) = runner {
            if self.threads[thread as usize].done {
                let core = self.threads[thread as usize].core;
                self.release_core(core, now);
                return;
            }
        }
        if self.run_queue.is_empty() {
            self.queue.schedule(now, Event::Run(runner));
            return;
        }
        let core = self.core_of(runner);
        self.release_core(core, now);
        self.make_ready(runner, now);
    }

    fn run(&mut self, runner: Runner, now: Ns) {
        match runner {
            Runner::App(thread) => self.run_thread(thread, now),
            Runner::Kswapd => self.run_kswapd(now),
            Runner::Kernel(kind) => self.run_kernel(kind, now),
        }
    }

    /// GC and discard workers: burn their CPU backlog in bursts of up to 1 ms.
    fn run_kernel(&mut self, kind: usize, now: Ns) {
        let state = &mut self.kernel[kind];
        if state.backlog_ns == 0 {
            state.awake = false;
            let core = state.core;
            self.release_core(core, now);
            return;
        }
        let burst = state.backlog_ns.min(MILLISECOND_NS);
        state.backlog_ns -= burst;
        if kind == KernelThread::Gc as usize {
            self.counters.cpu_gc_ns += burst;
        } else {
            self.counters.cpu_discard_ns += burst;
        }
        self.burst_end(Runner::Kernel(kind), now + burst);
    }

    /// Drains what the back end produced: completions to schedule, CPU work, notices.
    /// Re-entrant: handling a notice may call the back end again, whose output is
    /// handled by the nested call, so each notice is taken exactly once.
    pub(crate) fn process_io(&mut self, now: Ns) {
        loop {
            for index in 0..self.io.completions.len() {
                let (at, token) = self.io.completions[index];
                self.queue.schedule(at, Event::Backend(token));
            }
            self.io.completions.clear();
            for kind in 0..KERNEL_THREADS {
                let work = std::mem::take(&mut self.io.kernel_ns[kind]);
                if work == 0 {
                    continue;
                }
                self.kernel[kind].backlog_ns += work;
                if !self.kernel[kind].awake {
                    self.kernel[kind].awake = true;
                    self.make_ready(Runner::Kernel(kind), now);
                }
            }
            for tenant in 0..self.io.tenant_gc_ns.len() {
                self.counters.tenant_gc_cpu_ns[tenant] += std::mem::take(&mut self.io.tenant_gc_ns[tenant]);
            }
            if self.io.notices.is_empty() {
                return;
            }
            let mut notices = std::mem::replace(&mut self.io.notices, std::mem::take(&mut self.notice_spare));
            for &notice in &notices {
                self.notice(notice, now);
            }
            notices.clear();
            self.notice_spare = notices;
        }
    }

    fn tick(&mut self, now: Ns) {
        self.io.now = now;
        self.backend.tick(&mut self.io);
        self.process_io(now);
        // Host GC moved on a tenant's behalf counts against its bandwidth limits.
        let gc_bytes = self.backend.tenant_gc_bytes();
        for (tenant, &bytes) in gc_bytes.iter().enumerate().take(self.throttles.len()) {
            let moved = bytes - self.last_gc_bytes[tenant];
            self.last_gc_bytes[tenant] = bytes;
            if let Some(throttle) = &mut self.throttles[tenant] {
                throttle.charge_gc(now, moved);
            }
        }
        if self.pools.iter().any(|pool| pool.needs_reclaim() || !pool.waiters.is_empty()) {
            self.wake_kswapd(now);
        }
        self.queue.schedule(now + MILLISECOND_NS, Event::Tick);
    }

    fn sample(&mut self, now: Ns) {
        let (then, counters, backend_then, gc_then) = &self.last_sample;
        let seconds = (now - then) as f64 / 1e9;
        let backend_now = self.backend.counters();
        let gc_now = self.backend.tenant_gc_bytes();
        let mib = |pages: u64| pages as f64 * 4096.0 / (1 << 20) as f64 / seconds;
        let tenants = self.pools.len();
        let written = backend_now.swap_out_pages_written - backend_then.swap_out_pages_written;
        let media = backend_now.media_pages_written - backend_then.media_pages_written;
        let sample = Sample {
            t_s: (now - self.start_ns) as f64 / 1e9,
            swap_out_mib_s: mib(self.counters.swap_out_writes - counters.swap_out_writes),
            swap_in_mib_s: mib(self.counters.swap_ins - counters.swap_ins),
            tenant_swap_in_mib_s: (0..tenants)
                .map(|t| mib(self.counters.tenant_swap_in_pages[t] - counters.tenant_swap_in_pages[t]))
                .collect(),
            tenant_swap_out_mib_s: (0..tenants)
                .map(|t| mib(self.counters.tenant_swap_out_pages[t] - counters.tenant_swap_out_pages[t]))
                .collect(),
            tenant_gc_mib_s: (0..tenants)
                .map(|t| {
                    let now_bytes = gc_now.get(t).copied().unwrap_or(0);
                    let then_bytes = gc_then.get(t).copied().unwrap_or(0);
                    (now_bytes - then_bytes) as f64 / (1 << 20) as f64 / seconds
                })
                .collect(),
            waf: if written == 0 { 1.0 } else { media as f64 / written as f64 },
            utilization: backend_now.slots_used as f64 / backend_now.slots_capacity.max(1) as f64,
            gc_cpu_cores: (self.counters.cpu_gc_ns - counters.cpu_gc_ns) as f64 / (now - then) as f64,
        };
        self.series.push(sample);
        let gc_now = if gc_now.is_empty() { vec![0; tenants] } else { gc_now };
        self.last_sample = (now, self.counters.clone(), backend_now, gc_now);
        self.queue.schedule(now + self.sample_ns, Event::Sample);
    }
}
