//! The facts issue 34's daemon would rest on, measured on the running kernel: can one process
//! serve another's page faults, and what does it cost against serving them in-process?
//!
//! A tenant process (a fork of this one) makes a userfaultfd, registers a region and a
//! parking area, opens its own `/proc/self/mem`, and passes both descriptors to the
//! daemon process (this one) over a unix socket (`SCM_RIGHTS`). Then, alternating:
//!
//! - **in-process**: a thread of the tenant serves the tenant's faults (today's pager);
//! - **remote**: the daemon serves them through the received userfaultfd;
//!
//! each as a missing fault on a parked page (`UFFDIO_MOVE` back, no copy) and as a
//! missing fault filled with `UFFDIO_COPY` from the server's own memory. Besides: the
//! daemon parking the tenant's pages (`UFFDIO_MOVE` inside the tenant's address space,
//! driven from outside it), reading them through the tenant's `/proc/self/mem`, one
//! request-and-reply between the two processes over the socket (what a design that keeps
//! the fault in the tenant and asks the daemon for each read adds per fault), and the
//! rules: `process_madvise(MADV_DONTNEED)` on the tenant, an ioctl once the tenant is
//! gone.
//!
//! `cargo run --release -p znswap-pager --example uffd_remote [-- --pages N] [--json]`
//! prints a table (JSON with `--json`). Root, or `vm.unprivileged_userfaultfd=1`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use znswap_pager::uffd::{features, register_mode, Event, Userfaultfd};
use znswap_pager::PAGE_BYTES;
use znswap_wire::{Channel, Hello, Join, Name, Range, ToDaemon, MESSAGE_BYTES_MAX};

#[path = "common/area.rs"]
#[allow(dead_code)] // only `Area::new`: the tenant's halves are `Span`s
mod area;
#[path = "common/report.rs"]
mod report;
use area::{Area, PAGE};
use report::{us_per, Figure, Rule};

/// Rounds of each fault phase, alternating in-process and remote.
const ROUNDS: usize = 3;

/// Pages of the tenant's mapping by address (the tenant's arena is one mapping: the
/// region, then its parking area). The daemon's view owns no mapping.
#[derive(Clone, Copy)]
struct Span {
    base: u64,
    pages: u64,
}

impl Span {
    fn halves(arena: Range) -> (Span, Span) {
        let pages = arena.len() / PAGE / 2;
        (Span { base: arena.start(), pages }, Span { base: arena.start() + pages * PAGE, pages })
    }

    fn at(&self, page: u64) -> u64 {
        assert!(page < self.pages);
        self.base + page * PAGE
    }

    /// Writes one byte to each page (each becomes a private, exclusive page).
    fn touch(&self) {
        for page in 0..self.pages {
            // SAFETY: a page of the tenant's own mapping (only the tenant calls this).
            unsafe { (self.at(page) as *mut u8).write_volatile(page as u8 | 1) };
        }
    }
}

/// Steps of the conversation, one byte each.
mod step {
    /// Daemon -> tenant: the region's pages are parked (or dropped), touch them.
    pub const GO: u8 = 1;
    /// Tenant -> daemon: every page touched; the timings follow.
    pub const DONE: u8 = 2;
    pub const PING: u8 = 3;
}

/// How a phase's faults are served.
#[derive(Clone, Copy, PartialEq)]
enum Serve {
    /// Parked pages moved back (no copy).
    Unpark,
    /// Dropped pages filled from the server's memory.
    Copy,
}

fn main() {
    let (pages, json) = report::args(4096);
    let (daemon_end, tenant_end) = Channel::pair().expect("socketpair");
    // SAFETY: the child runs `tenant` and exits; it starts threads of its own only after
    // the fork, and this process has no other thread yet.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", io::Error::last_os_error());
    if child == 0 {
        drop(daemon_end);
        tenant(tenant_end, pages);
        // SAFETY: leaving the child without running the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    drop(tenant_end);
    // (`daemon` waits for the tenant and checks how it ended.)
    let (figures, rules) = daemon(&daemon_end, child);
    report::print(&figures, "rule", &rules, json);
}

// ---- the tenant ----

fn tenant(socket: Channel, pages: u64) {
    let uffd = Userfaultfd::new(features::MOVE | features::PAGEFAULT_FLAG_WP | features::EVENT_FORK, 0)
        .expect("userfaultfd with MOVE, WP and EVENT_FORK");
    let arena = Area::new(2 * pages);
    let (region, parking) = Span::halves(Range::new(arena.base, 2 * pages * PAGE).unwrap());
    region.touch();
    uffd.register(region.base, region.pages * PAGE, register_mode::MISSING | register_mode::WP).unwrap();
    uffd.register(parking.base, parking.pages * PAGE, register_mode::MISSING).unwrap();
    let mem = open_own_mem();
    // The daemon's own Hello, as a tenant's process will send it.
    let hello = ToDaemon::Hello(Hello {
        // SAFETY: a plain system call.
        pid: unsafe { libc::getpid() } as u32,
        forked: false,
        uffd_features: uffd.features(),
        arena: Range::new(arena.base, 2 * pages * PAGE).unwrap(),
        join: Join::New(Name::new("uffd_remote").unwrap()),
        memory_pages: pages,
    });
    // (An agent's socket, as a Hello takes one; this probe's daemon asks nothing on it.)
    let (_agent, pagers_end) = Channel::pair().expect("socketpair");
    socket.send_to_daemon(&hello, &[uffd.as_fd(), mem.as_fd(), pagers_end.as_fd()]).expect("send Hello");
    drop(mem);
    let uffd = Arc::new(uffd);
    let mut answer = [0u8; 1];
    assert_eq!(recv(&socket, &mut answer), 1);
    for (serve, remote) in phases(answer[0] == 1) {
        let server = (!remote).then(|| {
            // In-process: park (or drop) here, and serve from a thread of ours.
            prepare(&uffd, &region, &parking, serve);
            ServerThread::start(uffd.clone(), region, parking, serve)
        });
        if remote {
            // The daemon parks the pages and says go; only this process can
            // drop its own pages (the daemon's rule below).
            expect(&socket, step::GO);
            if serve == Serve::Copy {
                prepare(&uffd, &region, &parking, serve);
            }
        }
        let faults = touch_all(&region, serve);
        drop(server);
        send(&socket, &[step::DONE]);
        send_samples(&socket, &faults);
        expect(&socket, step::GO);
    }
    // A fork: the child keeps its registrations on a new userfaultfd the daemon reads,
    // and this fork returns only once the daemon has read the event; the child's pid
    // follows on the socket.
    expect(&socket, step::GO);
    // SAFETY: the child only sleeps and exits (async-signal-safe calls).
    let grandchild = unsafe { libc::fork() };
    if grandchild == 0 {
        // SAFETY: as above.
        unsafe {
            libc::usleep(200_000);
            libc::_exit(0);
        }
    }
    send(&socket, &(grandchild as u64).to_le_bytes());
    expect(&socket, step::GO);
    // SAFETY: our own child.
    unsafe { libc::waitpid(grandchild, std::ptr::null_mut(), 0) };
    // Request and reply: what asking the daemon for each fault's read would add.
    loop {
        let mut byte = [0u8; 1];
        let got = recv(&socket, &mut byte);
        if got == 0 {
            return; // the daemon is done with us
        }
        assert_eq!(byte[0], step::PING);
        send(&socket, &[step::PING]);
    }
}

/// Parks every page of the region (`Serve::Unpark`), or drops it (`Serve::Copy`), in
/// this process or the daemon's through the received userfaultfd (the same calls).
fn prepare(uffd: &Userfaultfd, region: &Span, parking: &Span, serve: Serve) {
    match serve {
        Serve::Unpark => {
            let moved = uffd.move_pages(parking.base, region.base, region.pages * PAGE, false).unwrap();
            assert_eq!(moved, region.pages * PAGE);
        }
        Serve::Copy => {
            // SAFETY: our own mapping.
            let done = unsafe {
                libc::madvise(region.base as *mut libc::c_void, (region.pages * PAGE) as usize, libc::MADV_DONTNEED)
            };
            assert_eq!(done, 0);
        }
    }
}

/// Touches every page once, timing each access (a fault served by someone).
fn touch_all(region: &Span, serve: Serve) -> Vec<u64> {
    let mut faults = Vec::with_capacity(region.pages as usize);
    for page in 0..region.pages {
        let started = Instant::now();
        // SAFETY: a page of our own registered mapping; a server maps it.
        let byte = unsafe { (region.at(page) as *const u8).read_volatile() };
        faults.push(started.elapsed().as_nanos() as u64);
        assert_eq!(byte, expected_byte(page, serve), "page {page} came back with its bytes");
    }
    // Written again, so the next park finds private pages with the touch's bytes.
    region.touch();
    faults
}

fn expected_byte(page: u64, serve: Serve) -> u8 {
    match serve {
        Serve::Unpark => page as u8 | 1,
        Serve::Copy => page as u8 ^ 0x5a,
    }
}

struct ServerThread {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl ServerThread {
    fn start(uffd: Arc<Userfaultfd>, region: Span, parking: Span, serve: Serve) -> ServerThread {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                serve_faults(&uffd, region.base, parking.base, serve, || stop.load(Ordering::Acquire))
            })
        };
        ServerThread { stop, thread: Some(thread) }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let served = self.thread.take().unwrap().join().unwrap();
        assert!(served > 0, "the tenant's thread served its faults");
    }
}

/// Serves missing faults on `region` until `done()`: waits on the descriptor (no
/// polling, as a handler that sleeps between faults), then moves the page back from
/// parking or copies its bytes in.
fn serve_faults(uffd: &Userfaultfd, region: u64, parking: u64, serve: Serve, done: impl Fn() -> bool) -> u64 {
    let mut served = 0;
    let mut bytes = vec![0u8; PAGE_BYTES];
    while !done() {
        if !uffd.poll(5).unwrap() {
            continue;
        }
        while let Some(event) = uffd.read_event().unwrap() {
            let Event::PageFault { address, .. } = event else { continue };
            let page_address = address & !(PAGE - 1);
            let page = (page_address - region) / PAGE;
            match serve {
                Serve::Unpark => {
                    uffd.move_pages(page_address, parking + page * PAGE, PAGE, true).unwrap();
                }
                Serve::Copy => {
                    bytes.fill(expected_byte(page, serve));
                    assert!(uffd.copy(page_address, &bytes, false, true).unwrap());
                }
            }
            served += 1;
        }
    }
    served
}

/// The phases both processes run, in order: each way of serving, in-process and
/// remote alternating which goes first. The daemon serves parked pages only if it can
/// move pages inside the tenant (`remote_move`).
fn phases(remote_move: bool) -> Vec<(Serve, bool)> {
    let mut phases = Vec::new();
    for round in 0..ROUNDS {
        for serve in [Serve::Unpark, Serve::Copy] {
            for remote in [round % 2 == 0, round % 2 == 1] {
                if remote && serve == Serve::Unpark && !remote_move {
                    continue;
                }
                phases.push((serve, remote));
            }
        }
    }
    phases
}

// ---- the daemon ----

fn daemon(socket: &Channel, child: libc::pid_t) -> (Vec<Figure>, Vec<Rule>) {
    let tenant = accept(socket, child);
    let pages = tenant.region.pages;
    let mut figures = read_through_mem(&tenant);
    let mut rules = Vec::new();

    let (rule, remote_move) = remote_move_rule(&tenant);
    rules.push(rule);
    send(socket, &[remote_move as u8]);

    let (faults, park_times) = fault_phases(socket, &tenant, remote_move);
    figures.extend(park_figure(&park_times, pages));
    figures.extend(fault_figures(faults));
    rules.push(write_protect_rule(&tenant));
    rules.push(fork_rule(socket, &tenant));
    send(socket, &[step::GO]);
    figures.extend(request_and_reply(socket, pages));

    rules.extend(process_madvise_rules(child, &tenant.region));
    // The tenant leaves once the socket closes; then the descriptor outlives its mm.
    shutdown(socket);
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the tenant failed (status {status:#x})");
    rules.extend(after_exit_rules(&tenant));
    (figures, rules)
}

/// What the daemon holds of the tenant: the descriptors its Hello brought, and its
/// arena's halves.
struct TenantView {
    uffd: Userfaultfd,
    uffd_features: u64,
    mem: OwnedFd,
    region: Span,
    parking: Span,
}

/// Receives the tenant's Hello and its descriptors.
fn accept(socket: &Channel, child: libc::pid_t) -> TenantView {
    let (message, mut fds) = socket.recv_to_daemon().expect("a Hello").expect("the tenant is there");
    let ToDaemon::Hello(hello) = message else { panic!("{message:?} before a Hello") };
    assert_eq!(hello.pid, child as u32);
    // (A socket pair's SO_PEERCRED names its maker, this process: a daemon's tenants
    // connect, and there the kernel names them.)
    drop(fds.pop()); // the agent's socket
    let mem = fds.pop().unwrap();
    let uffd = Userfaultfd::from_received(fds.pop().unwrap(), hello.uffd_features);
    let (region, parking) = Span::halves(hello.arena);
    TenantView { uffd, uffd_features: hello.uffd_features, mem, region, parking }
}

/// Reading the tenant's pages through its own /proc/self/mem (how a daemon would take a
/// victim's bytes to append them): one page per call, and 64 at a time.
fn read_through_mem(tenant: &TenantView) -> Vec<Figure> {
    let (mem, region, pages) = (&tenant.mem, &tenant.region, tenant.region.pages);
    let mut into = vec![0u8; 64 * PAGE_BYTES];
    let started = Instant::now();
    for page in 0..pages {
        let read = pread(mem, &mut into[..PAGE_BYTES], region.at(page));
        assert_eq!(read, PAGE_BYTES);
        assert_eq!(into[0], page as u8 | 1, "page {page} read through /proc/PID/mem");
    }
    let one_per_call = Figure {
        name: "read a tenant page, /proc/PID/mem, 1 per call".into(),
        us_per_page: us_per(started.elapsed(), pages),
        samples: pages,
        what: "pread of the tenant's own /proc/self/mem, passed by SCM_RIGHTS",
    };
    let started = Instant::now();
    for first in (0..pages).step_by(64) {
        let count = 64.min(pages - first) as usize;
        let read = pread(mem, &mut into[..count * PAGE_BYTES], region.at(first));
        assert_eq!(read, count * PAGE_BYTES);
    }
    let batched = Figure {
        name: "read tenant pages, /proc/PID/mem, 64 per call".into(),
        us_per_page: us_per(started.elapsed(), pages),
        samples: pages,
        what: "the same, contiguous",
    };
    vec![one_per_call, batched]
}

/// Can the daemon move pages inside the tenant's address space? The rule, and whether
/// it can (the page moved is moved back).
fn remote_move_rule(tenant: &TenantView) -> (Rule, bool) {
    let (uffd, region, parking) = (&tenant.uffd, &tenant.region, &tenant.parking);
    let remote_move = uffd.move_pages(parking.at(0), region.at(0), PAGE, false);
    let rule = Rule {
        name: "UFFDIO_MOVE inside the tenant, from the daemon",
        outcome: match &remote_move {
            Ok(bytes) => format!("moved {bytes} B"),
            Err(error) => error.to_string(),
        },
    };
    if remote_move.is_ok() {
        uffd.move_pages(region.at(0), parking.at(0), PAGE, false).unwrap();
    }
    (rule, remote_move.is_ok())
}

/// Fault timings by `[serve][remote]`.
type Faults = [[Vec<u64>; 2]; 2];

/// Runs the fault phases in step with the tenant: the tenant's timings, and how long
/// each of the daemon's parks of the whole region took.
fn fault_phases(socket: &Channel, tenant: &TenantView, remote_move: bool) -> (Faults, Vec<Duration>) {
    let pages = tenant.region.pages;
    let mut faults: Faults = Default::default();
    let mut park_times = Vec::new();
    for (serve, remote) in phases(remote_move) {
        let served = if remote {
            if serve == Serve::Unpark {
                park_times.push(park_from_daemon(tenant));
            }
            serve_from_daemon(socket, tenant, serve)
        } else {
            expect(socket, step::DONE);
            pages
        };
        faults[serve as usize][remote as usize].extend(recv_samples(socket, pages as usize));
        assert_eq!(served, pages);
        send(socket, &[step::GO]);
    }
    (faults, park_times)
}

/// Parks every page of the tenant's region, one per ioctl.
fn park_from_daemon(tenant: &TenantView) -> Duration {
    let started = Instant::now();
    for page in 0..tenant.region.pages {
        let moved = tenant.uffd.move_pages(tenant.parking.at(page), tenant.region.at(page), PAGE, false).unwrap();
        assert_eq!(moved, PAGE);
    }
    started.elapsed()
}

/// Serves the tenant's faults from a thread of the daemon until the tenant has touched
/// every page; returns the faults served.
fn serve_from_daemon(socket: &Channel, tenant: &TenantView, serve: Serve) -> u64 {
    let (uffd, region, parking) = (&tenant.uffd, &tenant.region, &tenant.parking);
    let done = AtomicBool::new(false);
    let served = std::thread::scope(|scope| {
        let server =
            scope.spawn(|| serve_faults(uffd, region.base, parking.base, serve, || done.load(Ordering::Acquire)));
        send(socket, &[step::GO]);
        expect(socket, step::DONE);
        done.store(true, Ordering::Release);
        server.join().unwrap()
    });
    assert_eq!(served, region.pages, "the daemon served every fault");
    served
}

fn park_figure(park_times: &[Duration], pages: u64) -> Option<Figure> {
    if park_times.is_empty() {
        return None;
    }
    let total_park: f64 = park_times.iter().map(|d| d.as_secs_f64()).sum();
    Some(Figure {
        name: "park a tenant page from the daemon, 1 per ioctl".into(),
        us_per_page: total_park * 1e6 / (park_times.len() as u64 * pages) as f64,
        samples: park_times.len() as u64 * pages,
        what: "UFFDIO_MOVE inside the tenant's address space, through its userfaultfd",
    })
}

/// p50 and p99 of each way of serving that ran.
fn fault_figures(mut faults: Faults) -> Vec<Figure> {
    let mut figures = Vec::new();
    for (serve, name) in [(Serve::Unpark, "unpark"), (Serve::Copy, "copy in")] {
        for (remote, by) in [(false, "a tenant thread"), (true, "the daemon")] {
            let samples = &mut faults[serve as usize][remote as usize];
            if samples.is_empty() {
                continue;
            }
            samples.sort_unstable();
            for (quantile, label) in [(0.5, "p50"), (0.99, "p99")] {
                figures.push(Figure {
                    name: format!("missing fault ({name}) served by {by}, {label}"),
                    us_per_page: quantile_us(samples, quantile),
                    samples: samples.len() as u64,
                    what: "as the faulting thread sees it; the server sleeps between faults",
                });
            }
        }
    }
    figures
}

/// The `quantile` of sorted nanosecond samples, in µs.
fn quantile_us(sorted: &[u64], quantile: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * quantile) as usize] as f64 / 1e3
}

/// Write protection of the tenant's pages, from the daemon.
fn write_protect_rule(tenant: &TenantView) -> Rule {
    let (uffd, region) = (&tenant.uffd, &tenant.region);
    Rule {
        name: "UFFDIO_WRITEPROTECT of a tenant page, from the daemon",
        outcome: match uffd.write_protect(region.at(1), PAGE, true, false) {
            Ok(()) => {
                uffd.write_protect(region.at(1), PAGE, false, false).unwrap();
                "done".into()
            }
            Err(error) => error.to_string(),
        },
    }
}

/// The tenant forks; the event (with the child's userfaultfd) must be read by the daemon
/// before the fork returns.
fn fork_rule(socket: &Channel, tenant: &TenantView) -> Rule {
    send(socket, &[step::GO]);
    let pid_before_read = fork_returned_unread(socket);
    let mut fork_events = read_fork_events(&tenant.uffd);
    let mut pid = [0u8; 8];
    assert_eq!(recv(socket, &mut pid), 8);
    let grandchild = u64::from_le_bytes(pid);
    Rule {
        name: "a tenant's fork (EVENT_FORK)",
        outcome: match fork_events.pop() {
            Some(child_uffd) => {
                let child_uffd = Userfaultfd::from_received(child_uffd, tenant.uffd_features);
                let protect = match child_uffd.write_protect(tenant.region.at(1), PAGE, true, false) {
                    Ok(()) => "write-protecting the child's copy through it: done".to_string(),
                    Err(error) => format!("write-protecting the child's copy through it: {error}"),
                };
                let order = if pid_before_read {
                    "the fork returned before the daemon read its event"
                } else {
                    "the fork waited 300 ms for the daemon to read its event"
                };
                format!("the daemon received the child's ({grandchild}) userfaultfd; {order}; {protect}")
            }
            None => "no fork event reached the daemon in 5 s".into(),
        },
    }
}

/// Whether the fork returned (its pid sent) while its event was still unread.
fn fork_returned_unread(socket: &Channel) -> bool {
    std::thread::sleep(Duration::from_millis(300));
    let mut peek = [0u8; 8];
    // SAFETY: a buffer of our own, valid for the call.
    let peeked = unsafe {
        libc::recv(socket.as_fd().as_raw_fd(), peek.as_mut_ptr().cast(), 8, libc::MSG_PEEK | libc::MSG_DONTWAIT)
    };
    peeked > 0
}

/// The child userfaultfds of fork events read within 5 s (stops at the first batch
/// holding one).
fn read_fork_events(uffd: &Userfaultfd) -> Vec<OwnedFd> {
    let mut fork_events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while fork_events.is_empty() && Instant::now() < deadline {
        if uffd.poll(100).unwrap() {
            while let Some(event) = uffd.read_event().unwrap() {
                if let Event::Fork { uffd } = event {
                    // SAFETY: the event handed us this descriptor.
                    fork_events.push(unsafe { OwnedFd::from_raw_fd(uffd) });
                }
            }
        }
    }
    fork_events
}

/// One request and its reply between the two processes, `count` times.
fn request_and_reply(socket: &Channel, count: u64) -> Vec<Figure> {
    let mut trips = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let started = Instant::now();
        send(socket, &[step::PING]);
        expect(socket, step::PING);
        trips.push(started.elapsed().as_nanos() as u64);
    }
    trips.sort_unstable();
    [(0.5, "p50"), (0.99, "p99")]
        .into_iter()
        .map(|(quantile, label)| Figure {
            name: format!("request and reply between the processes, {label}"),
            us_per_page: quantile_us(&trips, quantile),
            samples: trips.len() as u64,
            what: "unix SOCK_SEQPACKET, both ends blocking",
        })
        .collect()
}

/// `process_madvise` on the tenant's first page, from the daemon.
fn process_madvise_rules(child: libc::pid_t, region: &Span) -> Vec<Rule> {
    let pidfd = pidfd_open(child);
    let advice = |advice: libc::c_int| {
        let iov = libc::iovec { iov_base: region.base as *mut libc::c_void, iov_len: PAGE_BYTES };
        // SAFETY: one iovec naming the tenant's range; the kernel reads it only.
        let done = unsafe { libc::syscall(libc::SYS_process_madvise, pidfd.as_raw_fd(), &iov, 1, advice, 0) };
        if done < 0 {
            io::Error::last_os_error().to_string()
        } else {
            format!("done ({done} B)")
        }
    };
    vec![
        Rule { name: "process_madvise(MADV_DONTNEED) on the tenant", outcome: advice(libc::MADV_DONTNEED) },
        Rule { name: "process_madvise(MADV_PAGEOUT) on the tenant", outcome: advice(libc::MADV_PAGEOUT) },
    ]
}

/// What the tenant's descriptors answer once it has exited.
fn after_exit_rules(tenant: &TenantView) -> Vec<Rule> {
    let bytes = vec![0u8; PAGE_BYTES];
    let copy = Rule {
        name: "UFFDIO_COPY once the tenant has exited",
        outcome: match tenant.uffd.copy(tenant.region.base, &bytes, false, false) {
            Ok(done) => format!("answered {done}"),
            Err(error) => error.to_string(),
        },
    };
    let mut page = vec![0u8; PAGE_BYTES];
    // SAFETY: a buffer of our own, valid for the call.
    let read = unsafe {
        libc::pread(tenant.mem.as_raw_fd(), page.as_mut_ptr().cast(), PAGE_BYTES, tenant.region.base as libc::off_t)
    };
    let read_rule = Rule {
        name: "pread of its /proc/PID/mem once it has exited",
        outcome: if read < 0 { io::Error::last_os_error().to_string() } else { format!("read {read} B") },
    };
    vec![copy, read_rule]
}

// ---- plumbing ----

fn send(socket: &Channel, bytes: &[u8]) {
    socket.send(bytes, &[]).expect("send");
}

/// One message's bytes into `into` (its length returned; 0 when the peer is gone).
fn recv(socket: &Channel, into: &mut [u8]) -> usize {
    let mut buf = [0u8; MESSAGE_BYTES_MAX];
    let Some(received) = socket.recv(&mut buf).expect("recv") else { return 0 };
    assert!(received.fds.is_empty() && received.bytes <= into.len());
    into[..received.bytes].copy_from_slice(&buf[..received.bytes]);
    received.bytes
}

fn expect(socket: &Channel, want: u8) {
    let mut byte = [0u8; 1];
    assert_eq!((recv(socket, &mut byte), byte[0]), (1, want), "the other process's step");
}

fn shutdown(socket: &Channel) {
    // SAFETY: our own socket.
    unsafe { libc::shutdown(socket.as_fd().as_raw_fd(), libc::SHUT_RDWR) };
}

/// Timings, in messages of at most `MESSAGE_BYTES_MAX` bytes.
fn send_samples(socket: &Channel, samples: &[u64]) {
    for chunk in samples.chunks(MESSAGE_BYTES_MAX / 8) {
        let bytes: Vec<u8> = chunk.iter().flat_map(|s| s.to_le_bytes()).collect();
        send(socket, &bytes);
    }
}

fn recv_samples(socket: &Channel, count: usize) -> Vec<u64> {
    let mut samples = Vec::with_capacity(count);
    let mut buf = [0u8; MESSAGE_BYTES_MAX];
    while samples.len() < count {
        let got = recv(socket, &mut buf);
        assert!(got > 0 && got & 7 == 0, "timings come in whole samples");
        samples.extend(buf[..got].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())));
    }
    assert_eq!(samples.len(), count);
    samples
}

fn open_own_mem() -> OwnedFd {
    // SAFETY: a NUL-terminated path; a new descriptor or -1.
    let fd = unsafe { libc::open(c"/proc/self/mem".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open /proc/self/mem: {}", io::Error::last_os_error());
    // SAFETY: a descriptor we own from here on.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn pread(fd: &OwnedFd, into: &mut [u8], at: u64) -> usize {
    // SAFETY: a buffer of our own, valid for the call.
    let read = unsafe { libc::pread(fd.as_raw_fd(), into.as_mut_ptr().cast(), into.len(), at as libc::off_t) };
    assert!(read >= 0, "pread /proc/PID/mem: {}", io::Error::last_os_error());
    read as usize
}

fn pidfd_open(pid: libc::pid_t) -> OwnedFd {
    // SAFETY: a plain system call returning a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    assert!(fd >= 0, "pidfd_open: {}", io::Error::last_os_error());
    // SAFETY: a descriptor we own from here on.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}
