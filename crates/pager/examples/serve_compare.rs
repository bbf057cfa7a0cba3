//! What serving a program's memory from another process costs it (issue 34's design,
//! `docs/daemon.md`): the same workload on the same device, its pager in the program
//! (`Pager::new`, as `znswap run` today) or in another process (`Pager::serve_tenant`,
//! as the daemon's), alternating, every read checked.
//!
//! The workload: one thread writes every page of a region `--pages` large, then makes
//! `--ops` accesses at pages picked uniformly at random (a third of them writes), in a
//! budget of `--budget-pages`; each access is timed. Uniform random access is the worst
//! case for the cross-process design: nearly every access past the budget is a fault.
//!
//! `cargo run --release -p znswap-pager --example serve_compare -- [--pages N]
//! [--budget-pages N] [--ops N] [--rounds N] [--device PATH] [--json]`. Without
//! `--device`, a device in memory (the pager's own costs stand out); with one (made by
//! `znswap device create`), that device, reset first.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use znswap_pager::{
    agent_loop, hand_over, map_anonymous, FaultMode, Pager, PagerConfig, PagerStats, TenantLink, PAGE_BYTES,
};
use znswap_wire::{Channel, Join, Name, Range, ToDaemon, ToTenant, Token};
use znswap_zoned::{Geometry, MemDevice, ZonedDevice};

const CHILD_FD: &str = "ZNSWAP_SERVE_COMPARE_FD";

#[derive(Clone, Copy)]
struct Options {
    pages: u64,
    budget_pages: u64,
    ops: u64,
    rounds: u64,
}

/// One run's figures, as the workload saw them.
#[derive(Clone, Copy, Debug, serde::Serialize)]
struct Run {
    served_by: &'static str,
    round: u64,
    accesses_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    swap_ins: u64,
    swap_outs: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str, default: u64| {
        args.iter().position(|a| a == name).map_or(default, |i| args[i + 1].parse().expect("a number"))
    };
    let options = Options {
        pages: value("--pages", 65536),
        budget_pages: value("--budget-pages", 16384),
        ops: value("--ops", 200_000),
        rounds: value("--rounds", 3),
    };
    if let Ok(fd) = std::env::var(CHILD_FD) {
        let seed = value("--seed", 1);
        tenant(fd.parse().expect("a descriptor"), options, seed);
        return;
    }
    let device_path = args.iter().position(|a| a == "--device").map(|i| std::path::PathBuf::from(&args[i + 1]));
    let json = args.iter().any(|a| a == "--json");
    let device: Arc<dyn ZonedDevice> = match &device_path {
        Some(path) => Arc::from(znswap_zoned::open_path(path).expect("opening the device")),
        None => {
            let zones = (options.pages * 2 * PAGE_BYTES as u64).div_ceil(8 << 20).max(16) as u32;
            Arc::new(
                MemDevice::new(Geometry::from_bytes(4096, 16, zones, 8 << 20, 8 << 20, 8, 8, 4096).unwrap()).unwrap(),
            )
        }
    };
    let mut runs = Vec::new();
    for round in 1..=options.rounds {
        // Alternating which goes first: the disk's speed moves within minutes.
        let order = if round % 2 == 1 { [false, true] } else { [true, false] };
        for remote in order {
            device.reset_all().expect("resetting the device");
            let run =
                if remote { run_remote(&device, options, round) } else { run_in_process(&device, options, round) };
            if !json {
                eprintln!("{run:?}");
            }
            runs.push(run);
        }
    }
    if json {
        println!("{}", serde_json::to_string(&runs).unwrap());
        return;
    }
    let mut table = znswap_chart::Table::new(&[
        "round",
        "served by",
        "accesses/s",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "swap-ins",
        "swap-outs",
    ]);
    for run in &runs {
        table.row(vec![
            run.round.to_string(),
            run.served_by.into(),
            format!("{:.0}", run.accesses_per_s),
            format!("{:.1}", run.p50_us),
            format!("{:.1}", run.p99_us),
            format!("{:.1}", run.p999_us),
            run.swap_ins.to_string(),
            run.swap_outs.to_string(),
        ]);
    }
    print!("{}", table.render());
    let median = |remote: &str| {
        let mut values: Vec<f64> = runs.iter().filter(|r| r.served_by == remote).map(|r| r.accesses_per_s).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    println!(
        "another process / in-process, median accesses/s: {:.3}",
        median("another process") / median("the program")
    );
}

fn config(options: Options) -> PagerConfig {
    PagerConfig {
        fault_mode: FaultMode::HandlerThreads(1),
        ..PagerConfig::new(options.budget_pages * PAGE_BYTES as u64)
    }
}

fn run_in_process(device: &Arc<dyn ZonedDevice>, options: Options, round: u64) -> Run {
    let pager = Pager::new(device.clone(), config(options)).expect("starting the pager");
    let region = pager.alloc(options.pages * PAGE_BYTES as u64, 0).expect("a region");
    let (figures, before) = {
        let before = std::cell::Cell::new(PagerStats::default());
        let figures = work(region.as_ptr() as u64, options, round, || before.set(pager.stats()));
        (figures, before.get())
    };
    let stats = pager.stats().since(&before);
    drop(region);
    drop(pager);
    figures.into_run("the program", round, &stats)
}

fn run_remote(device: &Arc<dyn ZonedDevice>, options: Options, round: u64) -> Run {
    let (daemon, tenant) = Channel::pair().unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--pages",
            &options.pages.to_string(),
            "--budget-pages",
            &options.budget_pages.to_string(),
            "--ops",
            &options.ops.to_string(),
            "--seed",
            &round.to_string(),
        ])
        .env(CHILD_FD, tenant.as_fd().as_raw_fd().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    tenant.keep_in_child(&mut command);
    let mut child = command.spawn().expect("starting the tenant");
    drop(tenant);
    let (message, fds) = daemon.recv_to_daemon().unwrap().expect("the tenant's Hello");
    let ToDaemon::Hello(hello) = message else { panic!("{message:?}") };
    let link = TenantLink::from_hello(&hello, fds, 0).expect("a tenant's Hello");
    daemon
        .send_to_tenant(&ToTenant::Welcome { tenant: 0, token: Token([0; 16]), budget_pages: options.budget_pages })
        .unwrap();
    let (pager, _) = Pager::serve_tenant(device.clone(), config(options), link).expect("serving the tenant");
    // The tenant says when its timed part starts ("start") and gives its figures.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut before = PagerStats::default();
    let figures = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the tenant ended early");
        if line.trim() == "start" {
            before = pager.stats();
        } else if let Some(rest) = line.strip_prefix("figures ") {
            break serde_json::from_str::<Figures>(rest).expect("the tenant's figures");
        }
    };
    let stats = pager.stats().since(&before);
    drop(pager);
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "the tenant failed: {status}");
    figures.into_run("another process", round, &stats)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Figures {
    seconds: f64,
    ops: u64,
    p50_ns: u64,
    p99_ns: u64,
    p999_ns: u64,
}

impl Figures {
    fn into_run(self, served_by: &'static str, round: u64, stats: &PagerStats) -> Run {
        Run {
            served_by,
            round,
            accesses_per_s: self.ops as f64 / self.seconds,
            p50_us: self.p50_ns as f64 / 1e3,
            p99_us: self.p99_ns as f64 / 1e3,
            p999_us: self.p999_ns as f64 / 1e3,
            swap_ins: stats.core.swap_in_reads,
            swap_outs: stats.core.swap_outs_written,
        }
    }
}

/// The workload over `base` (a region of `options.pages`); `timed` is called as the
/// timed part begins. Panics on a page that does not hold what was last written.
fn work(base: u64, options: Options, seed: u64, timed: impl FnOnce()) -> Figures {
    let bytes = (options.pages * PAGE_BYTES as u64) as usize;
    // SAFETY: the region is mapped and paged for the workload's life; one thread.
    let memory = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, bytes) };
    let mut versions = vec![1u64; options.pages as usize];
    for page in 0..options.pages {
        znswap_workload::pattern::fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut samples = Vec::with_capacity(options.ops as usize);
    timed();
    let started = Instant::now();
    for _ in 0..options.ops {
        let page = rng.next_u64() % options.pages;
        let at = Instant::now();
        let bytes = &mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES];
        if rng.next_u64() % 3 == 0 {
            versions[page as usize] += 1;
            znswap_workload::pattern::fill(bytes, page, versions[page as usize]);
        } else {
            assert!(
                znswap_workload::pattern::holds(bytes, page, versions[page as usize]),
                "page {page} does not hold version {}",
                versions[page as usize]
            );
        }
        samples.push(at.elapsed().as_nanos() as u64);
    }
    let seconds = started.elapsed().as_secs_f64();
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    Figures { seconds, ops: options.ops, p50_ns: at(0.5), p99_ns: at(0.99), p999_ns: at(0.999) }
}

/// The tenant process: its region registered with its own userfaultfd and handed over,
/// an agent thread dropping what its pager asks, the workload on the main thread.
fn tenant(fd: i32, options: Options, seed: u64) {
    // SAFETY: the descriptor the parent passed us, ours from here on.
    let calls = Channel::from_fd(unsafe { OwnedFd::from_raw_fd(fd) });
    let len = options.pages * PAGE_BYTES as u64;
    let base = map_anonymous(len as usize).unwrap() as u64;
    let arena = Range::new(base, len).unwrap();
    let served = hand_over(&calls, arena, Join::New(Name::new("serve_compare").unwrap()), 0).expect("handing over");
    let agent = std::thread::spawn(move || {
        agent_loop(&served.agent, arena, &znswap_pager::DroppedPages::new(arena), |start, len| {
            // SAFETY: pages of our own region the pager wrote out (agent_loop checked).
            unsafe { libc::madvise(start as *mut libc::c_void, len as usize, libc::MADV_DONTNEED) }
        })
        .expect("the agent")
    });
    let figures = work(base, options, seed, || {
        println!("start");
        std::io::stdout().flush().unwrap();
    });
    println!("figures {}", serde_json::to_string(&figures).unwrap());
    std::io::stdout().flush().unwrap();
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
    agent.join().unwrap();
}
