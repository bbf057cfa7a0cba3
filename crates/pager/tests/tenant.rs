//! A pager serving another process's memory (`Pager::serve_tenant`, the daemon's
//! design in `docs/daemon.md`): a tenant process hands over its userfaultfd and its
//! `/proc/self/mem` over the wire, works a data set four times its budget, and checks
//! every page it reads against its own oracle; its agent thread drops what the pager
//! wrote out.
//!
//! The tenant is this test binary run again (`tenant_process`, ignored unless started
//! by the tests here with the socket's descriptor in `ZNSWAP_TEST_TENANT_FD`).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use znswap_pager::{
    agent_loop, hand_over, map_anonymous, serve_orphaned, DroppedPages, FaultMode, Pager, PagerConfig, TenantId,
    TenantLink, PAGE_BYTES,
};
use znswap_wire::{Channel, Join, Name, Range, ToDaemon, ToTenant, Token};
use znswap_zoned::{Geometry, MemDevice, ZonedDevice};

const FD_VARIABLE: &str = "ZNSWAP_TEST_TENANT_FD";
const ARENA_PAGES: u64 = 4096;
const BUDGET_PAGES: u64 = 1024;
const OPS: u64 = 40_000;

fn geometry() -> Geometry {
    Geometry::from_bytes(4096, 16, 48, 1 << 20, 1 << 20, 8, 8, 4096).unwrap()
}

/// Starts a tenant process (making `ops` accesses; its arena at `at` if not 0);
/// returns it with its Hello's link and the daemon's end of its connection, welcomed.
fn spawn_a_tenant(seed: u64, ops: u64, at: u64) -> (std::process::Child, TenantLink, Channel) {
    spawn_a_tenant_with(seed, ops, at, Tenant::Plain)
}

/// How a tenant process behaves beyond its accesses.
#[derive(Clone, Copy, PartialEq)]
enum Tenant {
    Plain,
    /// Serves its own faults once its pager is gone.
    Orphan,
    /// Its agent says it dropped pages it keeps (and, let go, serves its own faults).
    Liar,
}

/// `spawn_a_tenant`, a tenant behaving as `kind` says.
fn spawn_a_tenant_with(seed: u64, ops: u64, at: u64, kind: Tenant) -> (std::process::Child, TenantLink, Channel) {
    let (daemon, tenant) = Channel::pair().unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["tenant_process", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
        .env(FD_VARIABLE, tenant.as_fd().as_raw_fd().to_string())
        .env("ZNSWAP_TEST_TENANT_SEED", seed.to_string())
        .env("ZNSWAP_TEST_TENANT_OPS", ops.to_string())
        .env("ZNSWAP_TEST_TENANT_AT", at.to_string())
        .env("ZNSWAP_TEST_TENANT_ORPHAN", if kind == Tenant::Plain { "0" } else { "1" })
        .env("ZNSWAP_TEST_TENANT_LIES", if kind == Tenant::Liar { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    tenant.keep_in_child(&mut command);
    let child = command.spawn().unwrap();
    drop(tenant);

    let (message, fds) = daemon.recv_to_daemon().unwrap().expect("the tenant's Hello");
    let ToDaemon::Hello(hello) = message else { panic!("{message:?} before a Hello") };
    assert_eq!(hello.pid, child.id());
    assert_eq!(hello.arena.len(), ARENA_PAGES * PAGE_BYTES as u64);
    assert!(at == 0 || hello.arena.start() == at, "{:?} not at {at:#x}", hello.arena);
    let link = TenantLink::from_hello(&hello, fds, 0).unwrap();
    daemon.send_to_tenant(&ToTenant::Welcome { tenant: 0, token: Token([1; 16]), budget_pages: BUDGET_PAGES }).unwrap();
    (child, link, daemon)
}

fn config(budget_pages: u64, encrypt: bool) -> PagerConfig {
    let mut config =
        PagerConfig { fault_mode: FaultMode::HandlerThreads(1), ..PagerConfig::new(budget_pages * PAGE_BYTES as u64) };
    config.core.encrypt = encrypt;
    config
}

/// Starts the tenant process (making `ops` accesses) and its pager.
fn start_a_tenant(encrypt: bool, seed: u64, ops: u64) -> (std::process::Child, Pager, TenantId, u64) {
    let (child, link, _daemon) = spawn_a_tenant(seed, ops, 0);
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry()).unwrap());
    let config = config(BUDGET_PAGES, encrypt);
    let slack = config.core.slack_pages;
    let (pager, id) = Pager::serve_tenant(device, config, link).unwrap();
    (child, pager, id, slack)
}

/// Reads the tenant's output until it says it checked every read (or ends); returns
/// that line, and its output, which must stay open until it ends (its harness writes
/// there as it finishes).
fn wait_until_checked(child: &mut std::process::Child) -> (String, BufReader<std::process::ChildStdout>) {
    // (Past the test harness's own lines.)
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    while !line.contains("checked") {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
    }
    (line, out)
}

/// Serves the tenant process until it has checked its data, and returns the pager's
/// figures.
fn serve_a_tenant(encrypt: bool, seed: u64) -> znswap_pager::PagerStats {
    let (child, pager, _, slack) = start_a_tenant(encrypt, seed, OPS);
    let stats = serve_until_checked(child, pager);
    assert!(
        stats.core.resident_pages_max <= BUDGET_PAGES + slack + 64,
        "resident max {} over budget {BUDGET_PAGES} + slack {slack}",
        stats.core.resident_pages_max
    );
    assert_eq!((stats.core.lost_pages, stats.core.device_errors), (0, 0), "{stats:?}");
    assert!(stats.core.swap_outs_written > 3000, "the tenant's pages went to the device: {stats:?}");
    assert!(stats.core.swap_in_reads > 1000, "and came back: {stats:?}");
    assert!(stats.core.swap_outs_zero > 0, "all-zero pages are seen through its memory: {stats:?}");
    stats
}

/// Serves the tenant process `child` with `pager` until it says every page it read was
/// right (or fails), then stops the pager and lets the tenant end, which must be a
/// success; returns the pager's figures.
fn serve_until_checked(child: std::process::Child, pager: Pager) -> znswap_pager::PagerStats {
    serve_until_checked_then(child, Arc::new(pager), |_| {})
}

/// `serve_until_checked`, doing `then` with the pager once the tenant has checked its
/// data and before the pager stops.
fn serve_until_checked_then(
    mut child: std::process::Child,
    pager: Arc<Pager>,
    then: impl FnOnce(&Arc<Pager>),
) -> znswap_pager::PagerStats {
    let watchdog = watchdog(child.id());
    let (line, _out) = wait_until_checked(&mut child);
    then(&pager);
    let stats = pager.stats();
    drop(pager);
    // Only now may it go (its harness waits for its stdin to close).
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    drop(watchdog);
    assert!(status.success() && line.contains("checked"), "the tenant failed ({status}); it said {line:?}");
    stats
}

/// Stops the whole test binary if the tenant is not done in two minutes (a pager that
/// livelocks, as one whose agent never drops pages does, would otherwise hang the run):
/// dropping the returned sender disarms it.
fn watchdog(child: u32) -> std::sync::mpsc::Sender<()> {
    let (disarm, disarmed) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = disarmed.recv_timeout(Duration::from_secs(120)) {
            // Straight to the descriptor: the harness's capture would go with the abort.
            let message = format!("the tenant ({child}) and its pager were not done in 120 s: stopping\n");
            let _ = std::io::stderr().write_all(message.as_bytes());
            // SAFETY: a plain system call on our child.
            unsafe { libc::kill(child as i32, libc::SIGKILL) };
            std::process::abort();
        }
    });
    disarm
}

#[test]
fn another_process_is_paged_through_its_userfaultfd_and_reads_back_exactly() {
    serve_a_tenant(false, 1);
}

/// A tenant killed while its pager is swapping its pages in and out: the pager finds it
/// gone (its ioctls fail `ESRCH`, its memory reads nothing, its agent hangs up) and
/// stands, never panics, and stops cleanly. (A daemon serves many: one tenant's death
/// must not take the others with it.)
#[test]
fn a_tenant_killed_mid_run_leaves_its_pager_standing() {
    type Reached = fn(&znswap_pager::PagerStats) -> bool;
    // Killed at each stage of its run, as the pager's figures show it: in its first
    // pass over the arena (4x the budget), as its pages first go out, as they first
    // come back, and well into its accesses.
    let stages: [(&str, Reached); 4] = [
        ("its first faults served", |stats| stats.core.missing_faults >= 8),
        ("its first pages written out", |stats| stats.core.swap_outs_written >= 64),
        ("its first pages read back", |stats| stats.core.swap_in_reads >= 64),
        ("thousands of its pages read back", |stats| stats.core.swap_in_reads >= 4 * ARENA_PAGES),
    ];
    for (round, (stage, reached)) in stages.into_iter().enumerate() {
        let (mut child, pager, id, _) = start_a_tenant(false, 10 + round as u64, 100_000_000);
        let watchdog = watchdog(child.id());
        common::wait_until(Duration::from_secs(60), &format!("the tenant's pager to reach {stage}"), || {
            reached(&pager.stats())
        });
        let held = pager.tenant_figures(0);
        child.kill().unwrap();
        let status = child.wait().unwrap();
        let killed = pager.stats();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "killed mid-run, not finished: {status}");
        // Mid-run: the pager held pages of it in memory, and once it had written some
        // out, on the device, for its let-go to free.
        assert!(held.resident_pages > 0, "{stage}: nothing of the tenant was resident at its kill: {held:?}");
        assert!(round == 0 || held.swap_slots > 0, "{stage}: nothing of it was on the device: {held:?}");
        // Its pager meets the dead process (a round in flight, a queued append, a
        // fault's install; and here surely: a smaller budget makes it evict the dead
        // process's pages, whose protection fails), and lets it go at its evictor's
        // next rest: nothing of it is counted resident from then on.
        pager.set_budget(pager.budget_bytes_min()).unwrap();
        common::wait_until(Duration::from_secs(30), "the pager to let the dead tenant go", || {
            pager.stats().core.resident_pages == 0
        });
        let after = pager.stats();
        // It served none of its faults once it was dead but the one its only faulting
        // thread may have left with the handler thread.
        assert!(
            after.core.missing_faults <= killed.core.missing_faults + 1,
            "{stage}: {} faults served after the tenant was dead: {after:?}",
            after.core.missing_faults - killed.core.missing_faults
        );
        assert!(after.served_process_gone > 0, "the pager met the dead process: {after:?}");
        // and let it go at once (its slots freed, its pages uncounted), rather than pick
        // and fail to protect its pages again and again.
        assert!(after.served_process_gone < 10_000, "the evictor spun on a dead process: {after:?}");
        let figures = pager.tenant_figures(0);
        assert_eq!((figures.resident_pages, figures.swap_slots), (0, 0), "{stage}: not all let go: {figures:?}");
        pager.remove_tenant(id); // (What a daemon does on its connection's end: a no-op now.)
        drop(pager);
        drop(watchdog);
        eprintln!(
            "killed at {stage}: {} faults served, {} swap-outs, {} reads, {} ioctls and reads that found it gone",
            after.core.missing_faults,
            after.core.swap_outs_written,
            after.core.swap_in_reads,
            after.served_process_gone
        );
    }
}

/// One pager serves two processes at once (the daemon's case): their arenas lie at the
/// same addresses in their own processes (as they may), and each reads back exactly its
/// own data, each held to a budget of its own (a quarter and three quarters of the
/// pager's, `set_tenant_budget`); a third killed mid-run is let go while the two go on
/// and finish right.
#[test]
fn two_processes_share_one_pager_and_each_reads_back_its_own() {
    let geometry = Geometry::from_bytes(4096, 16, 96, 1 << 20, 1 << 20, 8, 8, 4096).unwrap();
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry).unwrap());
    let config = {
        let mut config = config(2 * BUDGET_PAGES, false);
        config.core.tenants = 3;
        config
    };
    let slack = config.core.slack_pages;
    let pager = Pager::serve(device, config).unwrap();
    let budgets = [BUDGET_PAGES / 2, 3 * BUDGET_PAGES / 2];
    for (tenant, pages) in budgets.iter().enumerate() {
        pager.set_tenant_budget(tenant as u32, Some(pages * PAGE_BYTES as u64)).unwrap();
    }
    const AT: u64 = 0x5a00_0000_0000;
    let (mut first, link, _first_daemon) = spawn_a_tenant(21, OPS, AT);
    let first_id = pager.add_tenant(TenantLink { tenant: 0, ..link }).unwrap();
    let (mut second, link, _second_daemon) = spawn_a_tenant(22, OPS, AT);
    let second_id = pager.add_tenant(TenantLink { tenant: 1, ..link }).unwrap();
    assert_ne!(first_id, second_id);
    let (mut doomed, link, _doomed_daemon) = spawn_a_tenant(23, 100_000_000, AT);
    let doomed_id = pager.add_tenant(TenantLink { tenant: 2, ..link }).unwrap();
    let watchdogs = [watchdog(first.id()), watchdog(second.id()), watchdog(doomed.id())];

    // Killed mid-run: once the pager has written pages of it out.
    common::wait_until(Duration::from_secs(60), "the doomed tenant's pages to go out", || {
        pager.tenant_figures(2).swap_outs > 0
    });
    doomed.kill().unwrap();
    assert_eq!(doomed.wait().unwrap().signal(), Some(libc::SIGKILL), "killed mid-run");
    let done = std::sync::atomic::AtomicBool::new(false);
    let (lines, most) = std::thread::scope(|scope| {
        let first = scope.spawn(|| wait_until_checked(&mut first));
        let second = scope.spawn(|| wait_until_checked(&mut second));
        // Each tenant's resident pages, sampled while they run (every 200 µs: the pause
        // is the sampling period, not a wait for anything).
        let sampler = scope.spawn(|| {
            let mut most = [0u64; 2];
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for (tenant, most) in most.iter_mut().enumerate() {
                    *most = (*most).max(pager.tenant_figures(tenant as u32).resident_pages);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            most
        });
        let lines = [first.join().unwrap(), second.join().unwrap()];
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (lines, sampler.join().unwrap())
    });
    for (tenant, (most, budget)) in most.iter().zip(budgets).enumerate() {
        // (Within its budget and the slack, with a fault's read-ahead and zero fill of
        // room: 64 pages.)
        assert!(*most <= budget + slack + 64, "tenant {tenant} held {most} pages, over its {budget} + slack {slack}");
        assert!(*most > budget / 2, "tenant {tenant} held at most {most} pages of its {budget}: its budget unused");
    }
    let stats = pager.stats();
    // Each is let go as a daemon does when its connection ends: its agent hangs up, and
    // then it may leave.
    for ((line, _out), (mut child, id)) in lines.iter().zip([(first, first_id), (second, second_id)]) {
        pager.remove_tenant(id);
        drop(child.stdin.take());
        let status = child.wait().unwrap();
        assert!(status.success() && line.contains("checked"), "a tenant failed ({status}); it said {line:?}");
    }
    drop(watchdogs);
    assert!(stats.served_process_gone > 0, "the pager met the killed process: {stats:?}");
    assert!(
        stats.core.resident_pages_max <= 2 * BUDGET_PAGES + slack + 64,
        "resident max {} over the shared budget {} + slack {slack}",
        stats.core.resident_pages_max,
        2 * BUDGET_PAGES
    );
    assert_eq!((stats.core.lost_pages, stats.core.device_errors), (0, 0), "{stats:?}");
    assert!(stats.core.swap_in_reads > 2000, "both came back from the device: {stats:?}");
    pager.remove_tenant(doomed_id);
    assert_eq!(pager.stats().core.resident_pages, 0, "every tenant let go: nothing counted");
}

/// A served process's own discard does not hold the pager's state while the process
/// zaps (the zap is a round trip to it): a process stopped there, or one that never
/// zaps, must not stop every other process's faults. The pager is reached from another
/// thread during the zap, and the tenant then goes on and checks every read.
#[test]
fn a_tenants_discard_holds_nothing_while_it_zaps() {
    let (child, link, _daemon) = spawn_a_tenant(41, OPS, 0);
    let arena = link.arena;
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry()).unwrap());
    let (pager, id) = Pager::serve_tenant(device, config(BUDGET_PAGES, false), link).unwrap();
    let stats = serve_until_checked_then(child, Arc::new(pager), |pager| {
        let (reached, reached_rx) = std::sync::mpsc::channel();
        let rc = pager.tenant_discard_then(id, arena.start(), 16 * PAGE_BYTES as u64, || {
            let pager = pager.clone();
            std::thread::spawn(move || reached.send(pager.stats()).unwrap());
            // The process would zap now; the pager answers meanwhile.
            match reached_rx.recv_timeout(Duration::from_secs(10)) {
                Ok(_) => 0,
                Err(_) => -1,
            }
        });
        assert_eq!(rc, 0, "the pager's state was held while the process zapped");
    });
    assert_eq!(stats.core.lost_pages, 0, "{stats:?}");
}

/// A tenant whose agent says it dropped pages it kept (broken, or cheating its budget):
/// its writes to those pages (write-protected for their swap-out) fault again and again
/// on pages the pager holds as gone. The pager finds it out and lets it go instead of
/// spinning on it with the tenant; the tenant then serves its own faults, and since it
/// dropped nothing, every read it checks is right.
#[test]
fn a_tenant_whose_agent_lies_about_drops_is_let_go_not_spun_on() {
    let (child, link, _daemon) = spawn_a_tenant_with(37, OPS, 0, Tenant::Liar);
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry()).unwrap());
    let (pager, _) = Pager::serve_tenant(device, config(BUDGET_PAGES, false), link).unwrap();
    let stats = serve_until_checked(child, pager);
    assert_eq!(stats.core.false_drops, 1, "found out once: {stats:?}");
}

/// The pager dies while its tenant runs (here: dropped; a daemon killed is the same to
/// the tenant, whose agent's connection ends): the tenant serves its own faults, and its
/// first touch of a page the pager had swapped out raises SIGBUS. Never a page read as
/// zeros: the tenant checks every read, and a wrong one ends it with a panic instead.
#[test]
fn a_tenant_whose_pager_dies_gets_sigbus_for_its_swapped_pages_never_zeros() {
    let (mut child, link, _daemon) = spawn_a_tenant_with(31, 100_000_000, 0, Tenant::Orphan);
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry()).unwrap());
    let (pager, _) = Pager::serve_tenant(device, config(BUDGET_PAGES, false), link).unwrap();
    let watchdog = watchdog(child.id());
    // Past its first pass over the arena (4x the budget): pages are out.
    common::wait_until(Duration::from_secs(60), "the tenant's first pass to be written out", || {
        pager.stats().core.swap_outs_written >= 2 * ARENA_PAGES
    });
    drop(pager);
    let status = child.wait().unwrap();
    drop(watchdog);
    assert_eq!(status.signal(), Some(libc::SIGBUS), "the tenant ended with {status}, not by SIGBUS");
}

#[test]
fn another_process_is_paged_sealed() {
    let stats = serve_a_tenant(true, 2);
    assert!(stats.pages_sealed > 3000, "its pages were sealed as they went out: {stats:?}");
}

/// The tenant: an arena registered with its own userfaultfd, handed to the test's pager
/// with its `/proc/self/mem`; an agent thread drops what the pager asks; the main thread
/// writes every page, then reads and writes at random, checking every read.
#[test]
#[ignore = "the tenant process of the tests above, started by them"]
fn tenant_process() {
    let fd: i32 = std::env::var(FD_VARIABLE)
        .expect("started by serve_a_tenant, which passes the socket")
        .parse()
        .expect("a descriptor number");
    let seed: u64 = std::env::var("ZNSWAP_TEST_TENANT_SEED").unwrap().parse().unwrap();
    let ops: u64 = std::env::var("ZNSWAP_TEST_TENANT_OPS").unwrap().parse().unwrap();
    // SAFETY: the descriptor the test passed us, ours from here on.
    let calls = Channel::from_fd(unsafe { OwnedFd::from_raw_fd(fd) });
    let len = ARENA_PAGES * PAGE_BYTES as u64;
    let at: u64 = std::env::var("ZNSWAP_TEST_TENANT_AT").unwrap().parse().unwrap();
    let base = if at == 0 {
        map_anonymous(len as usize).unwrap() as u64
    } else {
        // SAFETY: a new private mapping where nothing is (NOREPLACE fails otherwise).
        let base = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        assert_eq!(base as u64, at, "mapping the arena at {at:#x}: {}", std::io::Error::last_os_error());
        at
    };
    let arena = Range::new(base, len).unwrap();
    let served = hand_over(&calls, arena, Join::New(Name::new("tenant test").unwrap()), BUDGET_PAGES).unwrap();
    assert_eq!(served.budget_pages, BUDGET_PAGES);
    let orphan = std::env::var("ZNSWAP_TEST_TENANT_ORPHAN").is_ok_and(|value| value == "1");
    let lies = std::env::var("ZNSWAP_TEST_TENANT_LIES").is_ok_and(|value| value == "1");
    let agent = std::thread::spawn(move || {
        // (A liar says it dropped nothing it dropped: no page is lost should it be let go.)
        let dropped = DroppedPages::new(arena);
        let count = agent_loop(&served.agent, arena, &dropped, |start, len| {
            if lies {
                return 0;
            }
            // SAFETY: pages of our own arena the pager wrote out (agent_loop checked).
            unsafe { libc::madvise(start as *mut libc::c_void, len as usize, libc::MADV_DONTNEED) }
        })
        .unwrap();
        // The pager died under us (the test that says so): serve our own faults.
        if orphan {
            serve_orphaned(&served.uffd, arena, &dropped, None, || false, |_| {}).unwrap();
        }
        count
    });

    // SAFETY: the arena is ours, mapped for the process's life; one thread touches it.
    common::exercise_memory(unsafe { std::slice::from_raw_parts_mut(base as *mut u8, len as usize) }, ops, seed);
    // The pager's drops happened here: most of the arena is not resident.
    let mut residency = vec![0u8; ARENA_PAGES as usize];
    // SAFETY: one byte per page of our own mapping.
    assert_eq!(unsafe { libc::mincore(base as *mut libc::c_void, len as usize, residency.as_mut_ptr()) }, 0);
    let resident = residency.iter().filter(|&&byte| byte & 1 != 0).count() as u64;
    assert!(
        lies || resident < ARENA_PAGES / 2,
        "{resident} of {ARENA_PAGES} pages resident: the agent's drops did not happen"
    );
    println!("checked {ARENA_PAGES} pages and {ops} accesses, {resident} pages resident");
    std::io::stdout().flush().unwrap();
    // Wait for the test to stop the pager (stdin closes), then leave.
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
    if !lies {
        let dropped = agent.join().unwrap();
        assert!(dropped > 0, "the pager asked for drops");
    }
}
