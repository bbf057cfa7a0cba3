//! The pager over a device that fails: injected read and append errors, failed resets,
//! slow completions and zones going offline, in both fault modes. Whatever the device
//! does, no page may read back wrong; a page whose only copy is gone is reported lost
//! and poisoned (touching it raises SIGBUS with `BUS_MCEERR_AR`), and `lost_pages`
//! counts exactly the pages found lost; the pager neither hangs nor panics.
//!
//! A lost page's SIGBUS would kill the test, so this file installs a handler first
//! (`znswap_pager::lost_pages`) that records the page and maps a fresh one over it, as
//! `znswap bench` does; a page found lost is never checked again. Each test runs under a watchdog that
//! aborts the process, naming the test, if it takes over a minute: a hang is a failure.

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::fill;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use znswap_pager::{lost_pages, FaultMode, Pager, PagerConfig, PagerStats, PAGE_BYTES};
use znswap_zoned::{
    CreateOptions, FaultSpec, FaultyDevice, FileDevice, Geometry, InjectedFaults, MemDevice, ZoneCondition, ZonedDevice,
};

/// Aborts the process, naming the test, unless dropped within `limit`: a hung pager
/// fails the run instead of stalling it.
struct Watchdog {
    done: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn arm(name: &str, limit: Duration) -> Watchdog {
        let (done, wait) = mpsc::channel::<()>();
        let name = name.to_string();
        let thread = std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                eprintln!("{name}: still running after {limit:?}: the pager hung; aborting");
                std::process::abort();
            }
        });
        Watchdog { done: Some(done), thread: Some(thread) }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(thread) = self.thread.take() {
            thread.join().ok();
        }
    }
}

/// Zones of 1 MiB (256 slots), 8 open: 48 of them hold a 4 K-page working set three
/// times over; with 24 the GC must move pages and reset zones while faults go on.
fn geometry(zones: u32) -> Geometry {
    Geometry::from_bytes(4096, 16, zones, 1 << 20, 1 << 20, 8, 8, 4096).unwrap()
}

const REGION_PAGES: u64 = 4096;
const BUDGET_PAGES: u64 = 1024;
const THREADS: u64 = 2;
const OPS_PER_THREAD: u64 = 15_000;

struct Outcome {
    stats: PagerStats,
    injected: InjectedFaults,
    /// Pages whose touch raised SIGBUS with `BUS_MCEERR_AR`.
    lost_observed: u64,
    /// Pages read back and found exactly as last written.
    verified: u64,
}

/// Two threads, each on every other page of a region four times the budget: every page
/// written once, then random accesses (a third of them writes) with every read checked,
/// then every page checked. A page found lost is never checked again.
fn run(name: &str, fault_mode: FaultMode, spec: &str, file_device: bool, zones: u32, seed: u64) -> Outcome {
    lost_pages::install().expect("installing the lost-page handler");
    let _watchdog = Watchdog::arm(name, Duration::from_secs(60));
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ZonedDevice> = if file_device {
        Arc::new(FileDevice::create(dir.path().join("d.zns"), geometry(zones), CreateOptions::default()).unwrap())
    } else {
        Arc::new(MemDevice::new(geometry(zones)).unwrap())
    };
    let spec: FaultSpec = format!("{spec},seed={seed}").parse().unwrap();
    let device = Arc::new(FaultyDevice::new(inner, spec));
    let config = PagerConfig { fault_mode, ..PagerConfig::new(BUDGET_PAGES * PAGE_BYTES as u64) };
    let pager = Pager::new(device.clone(), config).unwrap();
    let region = pager.alloc(REGION_PAGES * PAGE_BYTES as u64, 0).unwrap();
    let base = region.as_ptr() as usize;
    let watch = lost_pages::watch(base, REGION_PAGES).expect("watching the region");
    let verified: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let watch = &watch;
                scope.spawn(move || {
                    let pages = REGION_PAGES / THREADS;
                    let page_of = |index: u64| index * THREADS + thread;
                    // SAFETY: each thread touches only its own pages (page % THREADS).
                    let bytes = |page: u64| unsafe {
                        std::slice::from_raw_parts_mut((base + page as usize * PAGE_BYTES) as *mut u8, PAGE_BYTES)
                    };
                    let mut expected = vec![0u8; PAGE_BYTES];
                    let mut verified = 0u64;
                    // Checks a page unless it is, or turns out while read to be, lost:
                    // a page lost in the middle of the comparison is a fresh page after
                    // the handler, which must not count as read back wrong.
                    let mut check = |page: u64, version: u64| {
                        if watch.is_lost(page) {
                            return;
                        }
                        fill(&mut expected, page, version);
                        let same = bytes(page) == expected.as_slice();
                        if watch.is_lost(page) {
                            return;
                        }
                        assert!(same, "{name}: page {page} does not hold version {version}");
                        verified += 1;
                    };
                    let mut versions = vec![0u64; pages as usize];
                    for index in 0..pages {
                        // One page in eight stays all-zero: it must come back as zeroes.
                        let version = if index % 8 == 7 { 0 } else { 1 };
                        versions[index as usize] = version;
                        fill(bytes(page_of(index)), page_of(index), version);
                    }
                    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed * 7919 + thread + 1);
                    for _ in 0..OPS_PER_THREAD {
                        let index = rng.next_u64() % pages;
                        let page = page_of(index);
                        if watch.is_lost(page) {
                            continue;
                        }
                        if rng.next_u64() % 3 == 0 {
                            versions[index as usize] += 1;
                            fill(bytes(page), page, versions[index as usize]);
                        } else {
                            check(page, versions[index as usize]);
                        }
                    }
                    for index in 0..pages {
                        check(page_of(index), versions[index as usize]);
                    }
                    verified
                })
            })
            .collect();
        workers.into_iter().map(|worker| worker.join().expect("a worker panicked")).sum()
    });
    let stats = pager.stats();
    let lost_observed = watch.count();
    drop(watch);
    drop(region);
    drop(pager);
    Outcome { stats, injected: device.injected(), lost_observed, verified }
}

/// Runs `body` in a child process (this test binary, running `test_name` alone), so a
/// pager that aborts (a panic in a signal handler cannot unwind) or hangs (the watchdog
/// aborts) fails this test, with the child's output, and not every test of the binary.
fn isolated(test_name: &str, body: impl FnOnce()) {
    const CHILD: &str = "ZNSWAP_FAULTS_CHILD";
    if std::env::var(CHILD).is_ok_and(|name| name == test_name) {
        body();
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(CHILD, test_name)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{test_name} failed in its child process ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One test per fault mode for a scenario `fn(name, FaultMode)`, each in its own process.
macro_rules! in_both_modes {
    ($scenario:ident: $handler_threads:ident, $self_paging:ident) => {
        #[test]
        fn $handler_threads() {
            let name = stringify!($handler_threads);
            isolated(name, || $scenario(name, FaultMode::HandlerThreads(2)));
        }

        #[test]
        fn $self_paging() {
            let name = stringify!($self_paging);
            isolated(name, || $scenario(name, FaultMode::SelfPaging));
        }
    };
}

/// What every run must show: losses reported exactly, and the pages not lost all
/// verified at the end (at least).
fn assert_sound(name: &str, outcome: &Outcome) {
    let Outcome { stats, injected, lost_observed, verified } = outcome;
    assert_eq!(
        stats.core.lost_pages, *lost_observed,
        "{name}: the pager reported {} lost pages, the application found {lost_observed} ({injected:?})",
        stats.core.lost_pages
    );
    assert!(
        *verified >= REGION_PAGES - lost_observed,
        "{name}: only {verified} pages verified with {lost_observed} lost"
    );
    assert!(stats.core.swap_outs_written > REGION_PAGES / 2 && stats.core.swap_in_reads > 1000, "{name}: {stats:?}");
}

fn read_errors(name: &str, fault_mode: FaultMode) {
    let outcome = run(name, fault_mode, "read=0.05", false, 48, 1);
    assert_sound(name, &outcome);
    assert!(outcome.injected.read_errors > 100, "{name}: {:?}", outcome.injected);
    assert!(outcome.stats.core.device_errors > 0, "{name}: {:?}", outcome.stats);
    assert_eq!(outcome.lost_observed, 0, "{name}: a failed read loses nothing (it is retried)");
}

in_both_modes!(read_errors: read_errors_are_retried_with_handler_threads, read_errors_are_retried_when_self_paging);

fn append_errors(name: &str, fault_mode: FaultMode) {
    let outcome = run(name, fault_mode, "append=0.1,reset=0.1", false, 24, 2);
    assert_sound(name, &outcome);
    assert!(outcome.injected.append_errors > 5, "{name}: {:?}", outcome.injected);
    assert!(outcome.stats.engine.gc_runs > 0 && outcome.injected.reset_errors > 0, "{name}: {:?}", outcome.injected);
    assert!(outcome.stats.core.device_errors > 0, "{name}: {:?}", outcome.stats);
    assert_eq!(outcome.lost_observed, 0, "{name}: a failed append keeps its pages resident");
}

in_both_modes!(append_errors: failed_appends_and_resets_lose_nothing_with_handler_threads, failed_appends_and_resets_lose_nothing_when_self_paging);

fn slow_completions(name: &str, fault_mode: FaultMode) {
    let outcome = run(name, fault_mode, "slow=0.05,slow-us=400", false, 48, 3);
    assert_sound(name, &outcome);
    assert!(outcome.injected.slow_completions > 100, "{name}: {:?}", outcome.injected);
    assert_eq!((outcome.stats.core.device_errors, outcome.lost_observed), (0, 0), "{name}: slow is not failed");
}

in_both_modes!(slow_completions: slow_completions_with_handler_threads, slow_completions_when_self_paging);

fn offline_zones(name: &str, fault_mode: FaultMode) {
    let outcome = run(name, fault_mode, "offline=2,offline-after=3000", false, 48, 4);
    assert_sound(name, &outcome);
    assert_eq!(outcome.injected.zones_offline, 2, "{name}: {:?}", outcome.injected);
    assert!(outcome.lost_observed > 0, "{name}: two zones with data went offline and nothing was lost");
    assert!(outcome.stats.core.device_errors > 0, "{name}: {:?}", outcome.stats);
}

in_both_modes!(offline_zones: offline_zones_lose_pages_that_are_reported_with_handler_threads, offline_zones_lose_pages_that_are_reported_when_self_paging);

fn everything_at_once(name: &str, fault_mode: FaultMode) {
    let spec = "read=0.01,append=0.02,reset=0.05,slow=0.01,slow-us=300,offline=2,offline-after=5000";
    let outcome = run(name, fault_mode, spec, true, 32, 5);
    assert_sound(name, &outcome);
    let injected = &outcome.injected;
    assert!(
        injected.read_errors > 0 && injected.append_errors > 0 && injected.zones_offline == 2,
        "{name}: {injected:?}"
    );
    assert!(outcome.stats.core.device_errors > 0, "{name}: {:?}", outcome.stats);
}

in_both_modes!(everything_at_once: every_fault_at_once_on_a_file_device_with_handler_threads, every_fault_at_once_on_a_file_device_when_self_paging);

/// A process that does not handle the SIGBUS of a lost page dies of it: the page is
/// poisoned, never handed back with whatever bytes. The child fills a region, takes a
/// zone holding its pages offline, and reads every page back; its SIGBUS handler only
/// says what it saw (the code and the page) and restores the default action, so the
/// retried access kills it.
fn a_lost_page_kills(test_name: &str, fault_mode: FaultMode) {
    const CHILD: &str = "ZNSWAP_LOST_PAGE_CHILD";
    if std::env::var_os(CHILD).is_some() {
        report_and_die::install();
        let inner: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48)).unwrap());
        let device = Arc::new(FaultyDevice::new(inner, FaultSpec::default()));
        let config = PagerConfig { fault_mode, ..PagerConfig::new(BUDGET_PAGES * PAGE_BYTES as u64) };
        let pager = Pager::new(device.clone(), config).unwrap();
        let mut region = pager.alloc(REGION_PAGES * PAGE_BYTES as u64, 0).unwrap();
        report_and_die::watch(region.as_ptr() as usize, REGION_PAGES);
        let memory = region.as_mut_slice();
        for page in 0..REGION_PAGES {
            fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
        }
        // The first full zone: written early, its pages still swapped out.
        let zone = device
            .inner()
            .report_zones()
            .unwrap()
            .into_iter()
            .find(|info| info.condition == ZoneCondition::Full)
            .expect("a full zone after writing four budgets of pages");
        device.fault_injector().unwrap().fail_zone(zone.zone, ZoneCondition::Offline);
        let mut expected = vec![0u8; PAGE_BYTES];
        for page in 0..REGION_PAGES {
            fill(&mut expected, page, 1);
            assert!(memory[page as usize * PAGE_BYTES..][..PAGE_BYTES] == expected[..], "page {page} read back wrong");
        }
        panic!("every page read back with zone {} offline; lost pages {}", zone.zone, pager.stats().core.lost_pages);
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGBUS),
        "the child must die of SIGBUS: {:?}\n{stderr}",
        output.status
    );
    assert!(
        stderr.contains(" at page ") && stderr.contains(" of the region"),
        "the SIGBUS must be a lost region page's:\n{stderr}"
    );
}

#[test]
fn a_lost_page_kills_a_process_that_does_not_handle_it_with_handler_threads() {
    a_lost_page_kills(
        "a_lost_page_kills_a_process_that_does_not_handle_it_with_handler_threads",
        FaultMode::HandlerThreads(2),
    );
}

#[test]
fn a_lost_page_kills_a_process_that_does_not_handle_it_when_self_paging() {
    a_lost_page_kills("a_lost_page_kills_a_process_that_does_not_handle_it_when_self_paging", FaultMode::SelfPaging);
}

/// The child's SIGBUS handler: writes which SIGBUS it got (and for a region address,
/// the page) to stderr, then restores the default action; the access is retried and
/// kills the process. `write` and `sigaction` are async-signal-safe.
mod report_and_die {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    use znswap_pager::PAGE_BYTES;

    static BASE: AtomicUsize = AtomicUsize::new(0);
    static PAGES: AtomicUsize = AtomicUsize::new(0);

    pub fn install() {
        // SAFETY: plain sigaction with a zero-initialised structure.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()), 0);
        }
    }

    pub fn watch(base: usize, pages: u64) {
        PAGES.store(pages as usize, SeqCst);
        BASE.store(base, SeqCst);
    }

    /// `value` in decimal at the end of `buffer`; returns where it starts.
    fn decimal(mut value: usize, buffer: &mut [u8; 20]) -> usize {
        let mut at = buffer.len();
        loop {
            at -= 1;
            buffer[at] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                return at;
            }
        }
    }

    extern "C" fn on_sigbus(_signal: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
        // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler.
        let (code, address) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
        let (base, pages) = (BASE.load(SeqCst), PAGES.load(SeqCst));
        let write = |bytes: &[u8]| {
            // SAFETY: writing a live buffer to stderr.
            unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        };
        let mut buffer = [0u8; 20];
        if base != 0 && (base..base + pages * PAGE_BYTES).contains(&address) {
            write(b"\nSIGBUS with si_code ");
            let at = decimal(code as usize, &mut buffer);
            write(&buffer[at..]);
            write(b" at page ");
            let at = decimal((address - base) / PAGE_BYTES, &mut buffer);
            write(&buffer[at..]);
            write(b" of the region\n");
        } else {
            write(b"\nSIGBUS with si_code ");
            let at = decimal(code as usize, &mut buffer);
            write(&buffer[at..]);
            write(b", not a lost region page\n");
        }
        // SAFETY: restoring the default action.
        unsafe {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
        }
    }
}
