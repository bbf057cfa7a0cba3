//! `znswap kv`: a key-value client that checks every value a server returns, to run a
//! real memcached or redis on paged memory (`znswap run`) or the kernel's swap and see
//! both that it is fast and that it is right.
//!
//! Every value is a function of (seed, key, version) ([`values`]), so the client keeps
//! one version number per key and nothing else. Keys are dealt out to the connections
//! (key k belongs to connection k mod C), each connection a thread that alone reads and
//! writes its keys: it always knows the latest version, and a GET that returns anything
//! else is wrong, not a race.
//!
//! Phases: load (SET every key at version 1, pipelined), run (the mix for --seconds, one
//! request at a time per connection, each timed), sweep (GET every key, pipelined).

mod protocol;
mod values;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, ValueEnum};
// hdrhistogram: percentiles of millions of request latencies in a fixed few tens of KiB,
// merged across threads; a small, well-kept crate (default features off: no
// serialisation, no compression).
use hdrhistogram::Histogram;
use serde::Serialize;
use znswap_workload::{EtcConfig, EtcLayout, EtcStream, KvStream, OpKind, YcsbConfig, YcsbStream};
use znswap_zoned::format_size;

use crate::progress::Progress;
use crate::stats::Table;
use protocol::{Connection, Protocol};
use values::{Keyspace, ValueSize};

/// Commands per round trip in the load and the sweep; and at most this many bytes of
/// them, so that large values do not pile up in one buffer.
const BATCH_COMMANDS: usize = 64;
const BATCH_BYTES: usize = 1 << 20;
/// Wrong or missing values kept for the report, per connection.
const MISMATCHES_KEPT: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mix {
    /// memcached under Facebook's ETC, as the paper runs it: 30 GETs per SET, 90 % of
    /// requests on 10 % of the keys, the popular keys scattered over the key space.
    Etc,
    /// YCSB workload A, as the paper runs it on redis: 50 % reads, 50 % updates, 80 % of
    /// them on the 20 % lowest-numbered keys (YCSB's hotspot).
    YcsbA,
    /// A read-mostly skewed mix: 90 % reads, 10 % updates, 80 % of them on 20 % of the
    /// keys; values of 4 KiB by default.
    Hot,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::Etc => "etc",
            Mix::YcsbA => "ycsb-a",
            Mix::Hot => "hot",
        }
    }
}

#[derive(Args)]
pub struct KvArgs {
    /// The server's protocol: memcache (memcached's text protocol) or redis (RESP).
    #[arg(long, value_enum, default_value = "memcache")]
    protocol: Protocol,
    /// The server, HOST:PORT [default: 127.0.0.1:11211 for memcache, 127.0.0.1:6379 for
    /// redis].
    #[arg(long)]
    addr: Option<String>,
    /// Value bytes to load, e.g. 256M or 1G: there are as many keys as it takes (keys,
    /// protocol and allocator overheads come on top in the server).
    #[arg(long, value_parser = crate::size, default_value = "256M")]
    data: u64,
    /// Bytes per value (8 to 1M), or `etc` for Facebook ETC's value sizes per key (its
    /// values under 8 bytes made 8, so that each one tells its version apart)
    /// [default: etc with --mix etc, 1000 with --mix ycsb-a, 4096 with --mix hot].
    #[arg(long, value_name = "BYTES|etc", value_parser = ValueSize::parse)]
    value_bytes: Option<ValueSize>,
    /// The request mix of the run [default: etc for memcache, ycsb-a for redis].
    #[arg(long, value_enum)]
    mix: Option<Mix>,
    /// Seconds the mix runs (0: load and sweep only).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Connections, each a thread with its own share of the keys.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=1024))]
    connections: u64,
    /// Load the keys and stop (then run later with --no-load and the same --data,
    /// --value-bytes and --seed).
    #[arg(long, conflicts_with = "no_load")]
    load_only: bool,
    /// Skip the load: the keys are on the server at version 1, from a `--load-only` with
    /// the same --data, --value-bytes and --seed.
    #[arg(long)]
    no_load: bool,
    /// Seed of the values and of the request streams.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run this shell command right before the timed mix and right after it, and wait
    /// for it: with ZNSWAP_KV_PHASE=mix-start or mix-end in its environment (a harness
    /// takes the server's counters there, so it can count what the mix alone cost; see
    /// scripts/kv-compare.sh). The run fails if the command does.
    #[arg(long, value_name = "COMMAND")]
    phase_hook: Option<String>,
    /// Do not fail on missing keys, only on wrong values: for a server that may evict
    /// (memcached with a small -m, redis with maxmemory and an eviction policy).
    #[arg(long)]
    allow_missing: bool,
    /// Seconds without progress on a request before giving up on the server.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// What a GET found, counted.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Verdicts {
    checked: u64,
    wrong: u64,
    missing: u64,
}

impl Verdicts {
    fn add(&mut self, other: Verdicts) {
        self.checked += other.checked;
        self.wrong += other.wrong;
        self.missing += other.missing;
    }
}

/// A value that came back wrong or not at all.
#[derive(Clone, Debug, Serialize)]
struct Mismatch {
    phase: &'static str,
    key: String,
    expected_version: u32,
    found: String,
}

/// One connection and the keys it owns: `index`, `index + connections`, …
struct Worker {
    index: u64,
    connections: u64,
    connection: Connection,
    /// The latest version written of each owned key, by local index (key / connections).
    versions: Vec<u32>,
    stream: Option<Box<dyn KvStream>>,
    latency_ns: Histogram<u64>,
    gets: u64,
    sets: u64,
    run_seconds: f64,
    run: Verdicts,
    sweep: Verdicts,
    mismatches: Vec<Mismatch>,
    /// List missing keys among the mismatches (not with --allow-missing: there the
    /// list is for wrong values).
    list_missing: bool,
    /// Buffers reused request after request.
    key: Vec<u8>,
    value: Vec<u8>,
    pending: Vec<u64>,
}

impl Worker {
    fn key_of(&self, local: u64) -> u64 {
        local * self.connections + self.index
    }

    /// Checks the GET of the owned key `local` that just returned `found` (and the value
    /// in `self.value`) against its latest version.
    fn check(&mut self, space: &Keyspace, local: u64, found: bool, phase: &'static str) {
        let key = self.key_of(local);
        let version = self.versions[local as usize];
        let verdicts = if phase == "run" { &mut self.run } else { &mut self.sweep };
        verdicts.checked += 1;
        let found = if !found {
            verdicts.missing += 1;
            if !self.list_missing {
                return;
            }
            "nothing (missing)".to_string()
        } else if space.is_value(key, version, &self.value) {
            return;
        } else {
            verdicts.wrong += 1;
            space.describe_wrong(key, version, &self.value)
        };
        if self.mismatches.len() < MISMATCHES_KEPT {
            self.mismatches.push(Mismatch { phase, key: format!("kv:{key}"), expected_version: version, found });
        }
    }

    /// SETs every owned key at version 1, a batch per round trip.
    fn load(&mut self, space: &Keyspace, loaded_bytes: &AtomicU64) -> Result<()> {
        for local in 0..self.versions.len() as u64 {
            let key = self.key_of(local);
            Keyspace::key_name(key, &mut self.key);
            space.fill_value(key, 1, &mut self.value);
            self.connection.queue_set(&self.key, &self.value);
            self.pending.push(local);
            loaded_bytes.fetch_add(self.value.len() as u64, Relaxed);
            if self.pending.len() == BATCH_COMMANDS || self.connection.queued_bytes() >= BATCH_BYTES {
                self.finish_sets()?;
            }
        }
        self.finish_sets()?;
        self.versions.fill(1);
        Ok(())
    }

    fn finish_sets(&mut self) -> Result<()> {
        self.connection.send()?;
        for index in 0..self.pending.len() {
            Keyspace::key_name(self.key_of(self.pending[index]), &mut self.key);
            self.connection.set_reply(&self.key)?;
        }
        self.pending.clear();
        Ok(())
    }

    /// The mix for `seconds`: one request at a time, each timed from its send to the end
    /// of its reply.
    fn run(&mut self, space: &Keyspace, seconds: f64, ops_done: &AtomicU64) -> Result<()> {
        let mut stream = self.stream.take().expect("the request stream is built before the run");
        let mut accesses = Vec::new(); // the stream's page accesses: the simulator's, unused here
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(seconds);
        while Instant::now() < deadline {
            let op = stream.next_op(&mut accesses);
            let local = op.record;
            let key = self.key_of(local);
            Keyspace::key_name(key, &mut self.key);
            match op.kind {
                OpKind::Get => {
                    self.connection.queue_get(&self.key);
                    let sent = Instant::now();
                    self.connection.send()?;
                    let found = self.connection.get_reply(&self.key, &mut self.value)?;
                    self.latency_ns.saturating_record(sent.elapsed().as_nanos() as u64);
                    self.gets += 1;
                    self.check(space, local, found, "run");
                }
                OpKind::Set => {
                    let version = self.versions[local as usize] + 1;
                    space.fill_value(key, version, &mut self.value);
                    self.connection.queue_set(&self.key, &self.value);
                    let sent = Instant::now();
                    self.connection.send()?;
                    self.connection.set_reply(&self.key)?;
                    self.latency_ns.saturating_record(sent.elapsed().as_nanos() as u64);
                    // The new version is the latest only once stored (a failed SET ends
                    // the run with its error).
                    self.versions[local as usize] = version;
                    self.sets += 1;
                }
            }
            ops_done.fetch_add(1, Relaxed);
        }
        self.run_seconds = start.elapsed().as_secs_f64();
        Ok(())
    }

    /// GETs every owned key, a batch per round trip, and checks each.
    fn sweep(&mut self, space: &Keyspace, swept: &AtomicU64) -> Result<()> {
        for local in 0..self.versions.len() as u64 {
            Keyspace::key_name(self.key_of(local), &mut self.key);
            self.connection.queue_get(&self.key);
            self.pending.push(local);
            if self.pending.len() == BATCH_COMMANDS {
                self.finish_gets(space)?;
                swept.fetch_add(BATCH_COMMANDS as u64, Relaxed);
            }
        }
        self.finish_gets(space)
    }

    fn finish_gets(&mut self, space: &Keyspace) -> Result<()> {
        self.connection.send()?;
        for index in 0..self.pending.len() {
            let local = self.pending[index];
            Keyspace::key_name(self.key_of(local), &mut self.key);
            let found = self.connection.get_reply(&self.key, &mut self.value)?;
            self.check(space, local, found, "sweep");
        }
        self.pending.clear();
        Ok(())
    }
}

/// Runs `work` on every worker, each on its own thread, and returns the first error.
/// Meanwhile, if `progress` is given, prints what it says about the elapsed time to a
/// terminal's stderr every half second.
fn in_parallel(
    workers: &mut [Worker],
    progress: Option<&dyn Fn(Duration) -> String>,
    work: impl Fn(&mut Worker) -> Result<()> + Sync,
) -> Result<Duration> {
    let start = Instant::now();
    let work = &work;
    std::thread::scope(|scope| {
        let handles: Vec<_> = workers.iter_mut().map(|worker| scope.spawn(move || work(worker))).collect();
        let line = Progress::new(progress.is_some());
        let mut shown = start;
        while !handles.iter().all(|handle| handle.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            if let Some(progress) = progress.filter(|_| shown.elapsed() >= Duration::from_millis(500)) {
                line.set(progress(start.elapsed()));
                shown = Instant::now();
            }
        }
        line.clear();
        let elapsed = start.elapsed();
        for handle in handles {
            handle.join().expect("a kv connection thread panicked")?;
        }
        Ok(elapsed)
    })
}

#[derive(Serialize)]
struct LoadReport {
    keys: u64,
    seconds: f64,
    ops_per_s: f64,
    mib_per_s: f64,
}

#[derive(Serialize)]
struct RunReport {
    seconds: f64,
    ops: u64,
    ops_per_s: f64,
    gets: u64,
    sets: u64,
    /// Request latency, send to last reply byte, over GETs and SETs alike.
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    mean_us: f64,
    wrong: u64,
    missing: u64,
}

#[derive(Serialize)]
struct SweepReport {
    keys: u64,
    seconds: f64,
    keys_per_s: f64,
    wrong: u64,
    missing: u64,
}

#[derive(Serialize)]
struct KvReport {
    protocol: &'static str,
    addr: String,
    mix: &'static str,
    value_bytes: String,
    seed: u64,
    connections: u64,
    keys: u64,
    data_bytes: u64,
    load: Option<LoadReport>,
    run: Option<RunReport>,
    sweep: Option<SweepReport>,
    /// Over the run and the sweep.
    wrong: u64,
    missing: u64,
    allow_missing: bool,
    /// The first few wrong or missing values.
    mismatches: Vec<Mismatch>,
}

/// Runs `znswap kv`; false when a value came back wrong, or missing without
/// --allow-missing.
pub fn run(args: KvArgs) -> Result<bool> {
    ensure!(args.seconds >= 0.0 && args.seconds.is_finite(), "--seconds must be 0 or more");
    ensure!(args.timeout > 0.0 && args.timeout.is_finite(), "--timeout must be positive");
    let protocol = args.protocol;
    let mix = args.mix.unwrap_or(match protocol {
        Protocol::Memcache => Mix::Etc,
        Protocol::Redis => Mix::YcsbA,
    });
    let value_size = args.value_bytes.unwrap_or(match mix {
        Mix::Etc => ValueSize::Etc,
        Mix::YcsbA => ValueSize::Fixed(1000),
        Mix::Hot => ValueSize::Fixed(4096),
    });
    let addr = args.addr.clone().unwrap_or_else(|| format!("127.0.0.1:{}", protocol.default_port()));
    let space = Keyspace::for_data(args.data, value_size, args.seed);
    let connections = args.connections.min(space.keys);
    let show = !args.json && std::io::stderr().is_terminal();
    let mut workers = open_workers(&args, protocol, &addr, &space, connections)?;
    let mut report = KvReport {
        protocol: protocol.name(),
        addr,
        mix: mix.name(),
        value_bytes: value_size.name(),
        seed: args.seed,
        connections,
        keys: space.keys,
        data_bytes: space.data_bytes(),
        load: None,
        run: None,
        sweep: None,
        wrong: 0,
        missing: 0,
        allow_missing: args.allow_missing,
        mismatches: Vec::new(),
    };
    if !args.no_load {
        report.load = Some(load_phase(&mut workers, &space, show)?);
    }
    if !args.load_only && args.seconds > 0.0 {
        report.run = Some(run_phase(&mut workers, &space, &args, mix, show)?);
    }
    if !args.load_only {
        report.sweep = Some(sweep_phase(&mut workers, &space, show)?);
    }
    report.wrong = report.run.as_ref().map_or(0, |r| r.wrong) + report.sweep.as_ref().map_or(0, |s| s.wrong);
    report.missing = report.run.as_ref().map_or(0, |r| r.missing) + report.sweep.as_ref().map_or(0, |s| s.missing);
    report.mismatches = workers.iter().flat_map(|w| w.mismatches.iter().cloned()).take(MISMATCHES_KEPT).collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    let failed = report.wrong > 0 || (report.missing > 0 && !args.allow_missing);
    if failed {
        eprintln!(
            "error: {} values came back wrong and {} keys were missing{}",
            report.wrong,
            report.missing,
            if args.json { " (see \"mismatches\")" } else { " (the first few are listed above)" }
        );
    } else if report.missing > 0 {
        eprintln!("note: {} keys were missing (allowed by --allow-missing)", report.missing);
    }
    Ok(!failed)
}

/// One worker per connection, each owning an equal share of the keys.
fn open_workers(
    args: &KvArgs,
    protocol: Protocol,
    addr: &str,
    space: &Keyspace,
    connections: u64,
) -> Result<Vec<Worker>> {
    let timeout = Duration::from_secs_f64(args.timeout);
    let mut workers = Vec::new();
    for index in 0..connections {
        let owned = space.keys / connections + u64::from(index < space.keys % connections);
        workers.push(Worker {
            index,
            connections,
            connection: Connection::open(protocol, addr, timeout)?,
            // --no-load: the load was an earlier --load-only, which leaves version 1.
            versions: vec![1; owned as usize],
            stream: None,
            latency_ns: Histogram::new_with_bounds(1, 1_000_000_000_000, 3).expect("valid histogram bounds"),
            gets: 0,
            sets: 0,
            run_seconds: 0.0,
            run: Verdicts::default(),
            sweep: Verdicts::default(),
            mismatches: Vec::new(),
            list_missing: !args.allow_missing,
            key: Vec::new(),
            value: Vec::new(),
            pending: Vec::new(),
        });
    }
    Ok(workers)
}

/// Every key written once, each connection its own.
fn load_phase(workers: &mut [Worker], space: &Keyspace, show: bool) -> Result<LoadReport> {
    let data_bytes = space.data_bytes();
    let loaded = AtomicU64::new(0);
    let progress = |elapsed: Duration| {
        let bytes = loaded.load(Relaxed);
        format!(
            "load: {} of {} ({:.0} %), {:.0} s",
            format_size(bytes),
            format_size(data_bytes),
            bytes as f64 * 100.0 / data_bytes as f64,
            elapsed.as_secs_f64()
        )
    };
    let elapsed = in_parallel(workers, show.then_some(&progress), |w| w.load(space, &loaded))?;
    let seconds = elapsed.as_secs_f64();
    Ok(LoadReport {
        keys: space.keys,
        seconds,
        ops_per_s: space.keys as f64 / seconds,
        mib_per_s: data_bytes as f64 / seconds / (1 << 20) as f64,
    })
}

/// The timed mix, every value read checked.
fn run_phase(workers: &mut [Worker], space: &Keyspace, args: &KvArgs, mix: Mix, show: bool) -> Result<RunReport> {
    // Streams first (the ETC one lays out a model of memcached's memory, a second or
    // so for millions of keys), so the timed part starts together on every connection.
    in_parallel(workers, None, |w| {
        let owned = w.versions.len() as u64;
        let stream_seed = args.seed.wrapping_mul(1000).wrapping_add(w.index);
        w.stream = Some(match mix {
            Mix::Etc => {
                let layout = EtcLayout::new(&EtcConfig::paper(owned, stream_seed))?;
                Box::new(EtcStream::new(Arc::new(layout), stream_seed))
            }
            Mix::YcsbA => Box::new(YcsbStream::new(YcsbConfig::workload_a(owned), stream_seed)?),
            Mix::Hot => Box::new(YcsbStream::new(YcsbConfig::read_mostly(owned), stream_seed)?),
        });
        Ok(())
    })?;
    run_phase_hook(args.phase_hook.as_deref(), "mix-start")?;
    let ops_done = AtomicU64::new(0);
    let progress = |elapsed: Duration| {
        format!(
            "run: {:.0} of {:.0} s, {:.0} ops/s",
            elapsed.as_secs_f64(),
            args.seconds,
            ops_done.load(Relaxed) as f64 / elapsed.as_secs_f64()
        )
    };
    in_parallel(workers, show.then_some(&progress), |w| w.run(space, args.seconds, &ops_done))?;
    run_phase_hook(args.phase_hook.as_deref(), "mix-end")?;
    let mut latency = workers[0].latency_ns.clone();
    for worker in &workers[1..] {
        latency.add(&worker.latency_ns).expect("histograms of equal bounds add up");
    }
    let mut verdicts = Verdicts::default();
    workers.iter().for_each(|w| verdicts.add(w.run));
    let (gets, sets) = (workers.iter().map(|w| w.gets).sum::<u64>(), workers.iter().map(|w| w.sets).sum::<u64>());
    let seconds = workers.iter().map(|w| w.run_seconds).fold(0.0, f64::max);
    let us = |ns: u64| ns as f64 / 1e3;
    Ok(RunReport {
        seconds,
        ops: gets + sets,
        ops_per_s: (gets + sets) as f64 / seconds,
        gets,
        sets,
        p50_us: us(latency.value_at_quantile(0.50)),
        p99_us: us(latency.value_at_quantile(0.99)),
        p999_us: us(latency.value_at_quantile(0.999)),
        max_us: us(latency.max()),
        mean_us: latency.mean() / 1e3,
        wrong: verdicts.wrong,
        missing: verdicts.missing,
    })
}

/// Every key read back and checked against its last version.
fn sweep_phase(workers: &mut [Worker], space: &Keyspace, show: bool) -> Result<SweepReport> {
    let swept = AtomicU64::new(0);
    let progress = |elapsed: Duration| {
        let keys = swept.load(Relaxed);
        format!("sweep: {keys} of {} keys checked, {:.0} s", space.keys, elapsed.as_secs_f64())
    };
    let seconds = in_parallel(workers, show.then_some(&progress), |w| w.sweep(space, &swept))?.as_secs_f64();
    let mut verdicts = Verdicts::default();
    workers.iter().for_each(|w| verdicts.add(w.sweep));
    Ok(SweepReport {
        keys: verdicts.checked,
        seconds,
        keys_per_s: verdicts.checked as f64 / seconds,
        wrong: verdicts.wrong,
        missing: verdicts.missing,
    })
}

fn print(report: &KvReport) {
    println!(
        "{} at {}: mix {}, {} connections, {} keys, {} of values ({}), seed {}",
        report.protocol,
        report.addr,
        report.mix,
        report.connections,
        report.keys,
        format_size(report.data_bytes),
        if report.value_bytes == "etc" {
            "ETC sizes".to_string()
        } else {
            format!("{} bytes each", report.value_bytes)
        },
        report.seed
    );
    let mut table =
        Table::new(&["phase", "seconds", "ops/s", "GETs", "SETs", "p50 µs", "p99 µs", "p99.9 µs", "wrong", "missing"]);
    let dash = || "-".to_string();
    if let Some(load) = &report.load {
        let mut row = vec!["load".into(), format!("{:.1}", load.seconds), format!("{:.0}", load.ops_per_s)];
        row.extend([dash(), load.keys.to_string(), dash(), dash(), dash(), dash(), dash()]);
        table.row(row);
    }
    if let Some(run) = &report.run {
        table.row(vec![
            "run".into(),
            format!("{:.1}", run.seconds),
            format!("{:.0}", run.ops_per_s),
            run.gets.to_string(),
            run.sets.to_string(),
            format!("{:.1}", run.p50_us),
            format!("{:.1}", run.p99_us),
            format!("{:.1}", run.p999_us),
            run.wrong.to_string(),
            run.missing.to_string(),
        ]);
    }
    if let Some(sweep) = &report.sweep {
        let mut row = vec!["sweep".into(), format!("{:.1}", sweep.seconds), format!("{:.0}", sweep.keys_per_s)];
        row.extend([sweep.keys.to_string(), dash(), dash(), dash(), dash()]);
        row.extend([sweep.wrong.to_string(), sweep.missing.to_string()]);
        table.row(row);
    }
    print!("{}", table.render());
    for mismatch in &report.mismatches {
        println!(
            "{}: {} at version {} returned {}",
            mismatch.phase, mismatch.key, mismatch.expected_version, mismatch.found
        );
    }
}

/// `--phase-hook`: runs `command` with `sh -c`, the phase in ZNSWAP_KV_PHASE, and waits.
fn run_phase_hook(command: Option<&str>, phase: &str) -> Result<()> {
    let Some(command) = command else { return Ok(()) };
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("ZNSWAP_KV_PHASE", phase)
        .status()
        .with_context(|| format!("running the --phase-hook command at {phase}"))?;
    if !status.success() {
        bail!("the --phase-hook command failed at {phase} ({status}): {command}");
    }
    Ok(())
}
