//! `znswap`: swap for zoned (ZNS) SSDs.

mod cmd_bench;
mod cmd_daemon;
mod cmd_device;
mod cmd_dst;
mod cmd_dst_pager;
mod cmd_kv;
mod cmd_run;
mod cmd_sim;
mod cmd_status;
mod device_bench;
mod device_path;
mod flags;
mod progress;
mod run_tree;
mod stats;
mod swap_bench;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use flags::{size, DeviceFlag};

#[derive(Parser)]
#[command(
    name = "znswap",
    version,
    about = "Swap for zoned (ZNS) SSDs, after ZNSwap (USENIX ATC '22)",
    long_about = "Swap for zoned (ZNS) SSDs, after ZNSwap (USENIX ATC '22).\n\n\
        Commands work on a zoned device given by --device, or on the embedded default: a \
        file-backed emulated ZNS device at $ZNSWAP_DEVICE or ~/.cache/znswap/default.zns, \
        created on first use (64 zones of 64 MiB with 62 MiB capacity, 4 KiB LBAs with \
        16 B metadata, 14 open / 14 active zones)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create, inspect, reset, check and measure zoned devices.
    #[command(subcommand)]
    Device(DeviceCommand),
    /// Run a workload on paged memory larger than its budget, swapped to a zoned device
    ///
    /// Every page is verified, and the device's own limits are measured in the same run,
    /// so the figures can be read against them.
    Bench(cmd_bench::SwapBenchArgs),
    /// Deterministic simulation testing of the swap engine (or, with --pager, of the
    /// live pager)
    ///
    /// Random workloads with injected device faults, every swap-in checked against an
    /// oracle; a failing seed reproduces its run exactly. Several seeds end with their
    /// coverage: the share of seeds that reached each engine (or pager) path and fault
    /// stage.
    Dst(DstArgs),
    /// Simulate swap in virtual time on ZNS and block SSD models
    ///
    /// The paper's figures (`sim paper`) and device write amplification (`sim waf`).
    #[command(subcommand)]
    Sim(cmd_sim::SimCommand),
    /// A key-value client for memcached or redis that checks every value it reads back
    ///
    /// Load, a timed ETC or YCSB-A mix (ops/s, latency percentiles), a sweep of all keys;
    /// a non-zero exit on any wrong or missing value.
    Kv(cmd_kv::KvArgs),
    /// Run an unmodified program with its heap paged
    ///
    /// The program and every process it forks or executes are held to --memory together,
    /// as a memory cgroup holds them: memory beyond it is swapped to the zoned device, and
    /// back on fault. Prints what the pager did at exit and returns the program's exit
    /// status. The program and its children run without transparent huge pages.
    /// `znswap run --memory 256M -- redis-server`
    Run(cmd_run::RunArgs),
    /// Serve many programs from one zoned device
    ///
    /// The daemon owns the device and pages the heap of every program started with
    /// `znswap run --daemon -- CMD`, within one --memory for them all. Runs in the
    /// foreground until SIGINT or SIGTERM. `znswap daemon --memory 1G`
    Daemon(cmd_daemon::DaemonArgs),
    /// What a running daemon holds and has done, and each tenant's share
    ///
    /// Memory, pages swapped out and read back, GC bytes charged, the device's WAF and
    /// wear. `znswap status`, `znswap status --prometheus`
    Status(cmd_status::StatusArgs),
}

#[derive(Args)]
struct DstArgs {
    /// The first seed; each seed picks its own scenario and reproduces it exactly.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many seeds to run, from --seed on.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Operations per seed.
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Print JSON
    ///
    /// `{"seeds": [reports], "coverage": {figure: value}}` however many seeds (shares of
    /// seeds as fractions), plus `"below_floors": [{name, value, floor}]` with --floors.
    #[arg(long)]
    json: bool,
    /// Fail when a coverage figure of the run falls below its floor in this file
    ///
    /// The exit is non-zero and each figure below its floor is named; CI uses
    /// crates/dst/coverage-floors.json, and with --pager crates/dst/pager-coverage-floors.json.
    #[arg(long, value_name = "FILE")]
    floors: Option<PathBuf>,
    /// Simulate the live pager instead of the swap engine alone
    ///
    /// Its core over a model of the page tables, with seeded interleavings of application
    /// threads, fault handlers, the evictor and the I/O thread; --ops counts its steps.
    #[arg(long)]
    pager: bool,
}

#[derive(Subcommand)]
enum DeviceCommand {
    /// Create a file-backed emulated ZNS device (a regular file, or a block device).
    Create(CreateArgs),
    /// Print every zone's start, length, capacity, write pointer and condition.
    Report(ReportArgs),
    /// Reset one zone, or all of them (their data is gone).
    Reset(ResetArgs),
    /// Measure the device's raw limits (destroys its data)
    ///
    /// Append bandwidth, 4 KiB read latency and throughput, reset latency.
    Bench(BenchArgs),
    /// Run the zoned conformance suite against the device. Destroys its data.
    Check(CheckArgs),
}

#[derive(Args)]
struct CreateArgs {
    /// Where to create the device (a file, created if missing, or a block device).
    #[arg(long, visible_alias = "path", value_name = "DEVICE")]
    device: PathBuf,
    /// Number of zones.
    #[arg(long)]
    zones: u32,
    /// Distance between zone starts, e.g. 64M (need not be a power of two).
    #[arg(long, value_parser = size)]
    zone_size: u64,
    /// Writable bytes per zone, at most the zone size [default: the zone size].
    #[arg(long, value_parser = size)]
    zone_capacity: Option<u64>,
    /// Zones that may be open at once (0: no limit) [default: 14, or the zone count if lower].
    #[arg(long)]
    max_open: Option<u32>,
    /// Zones that may be open or closed at once (0: no limit) [default: --max-open].
    #[arg(long)]
    max_active: Option<u32>,
    /// Logical block size: 512 or 4096.
    #[arg(long, default_value_t = 4096)]
    lba_size: u32,
    /// Per-LBA metadata bytes: 0, 8, 16 or 64.
    #[arg(long, default_value_t = 16)]
    metadata_bytes: u32,
    /// Minimum write unit, a multiple of the LBA size, e.g. 192K [default: --lba-size].
    #[arg(long, value_parser = size)]
    write_granularity: Option<u64>,
    /// Largest zone append [default: 1 MiB, capped at the zone capacity].
    #[arg(long, value_parser = size)]
    zone_append_max: Option<u64>,
    /// Overwrite an existing file or device.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
struct ReportArgs {
    #[command(flatten)]
    device: DeviceFlag,
    /// Print JSON: the geometry, counters and a `zones` array.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ResetArgs {
    #[command(flatten)]
    device: DeviceFlag,
    /// The zone to reset.
    #[arg(long, conflicts_with = "all")]
    zone: Option<u32>,
    /// Reset every zone.
    #[arg(long)]
    all: bool,
}

#[derive(Args)]
struct BenchArgs {
    #[command(flatten)]
    device: DeviceFlag,
    /// Threads for the multi-threaded phases [default: the number of CPUs].
    #[arg(long)]
    threads: Option<usize>,
    /// Size of each append in the bandwidth phases.
    #[arg(long, value_parser = size, default_value = "128K")]
    io_size: u64,
    /// Bytes each append phase writes at most [default: a fifth of the device, at most 1 GiB].
    #[arg(long, value_parser = size)]
    bytes: Option<u64>,
    /// Seconds each phase runs at most.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CheckArgs {
    #[command(flatten)]
    device: DeviceFlag,
    /// Print JSON instead of a list.
    #[arg(long)]
    json: bool,
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Bench(args) => return cmd_bench::run(args),
        Command::Sim(command) => {
            if !cmd_sim::run(command)? {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Run(args) => return Ok(ExitCode::from(cmd_run::run(args)?)),
        Command::Daemon(args) => cmd_daemon::run(args)?,
        Command::Status(args) => cmd_status::run(args)?,
        Command::Kv(args) => {
            if !cmd_kv::run(args)? {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Dst(args) => {
            anyhow::ensure!(args.seeds > 0 && args.ops > 0, "--seeds and --ops must be positive");
            if args.pager {
                let request = cmd_dst_pager::PagerDstRequest {
                    seed: args.seed,
                    seeds: args.seeds,
                    steps: args.ops,
                    json: args.json,
                    floors: args.floors,
                };
                if !cmd_dst_pager::dst(&request)? {
                    return Ok(ExitCode::FAILURE);
                }
                return Ok(ExitCode::SUCCESS);
            }
            let request = cmd_dst::DstRequest {
                seed: args.seed,
                seeds: args.seeds,
                ops: args.ops,
                json: args.json,
                floors: args.floors,
            };
            if !cmd_dst::dst(&request)? {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Device(command) => match command {
            DeviceCommand::Create(args) => cmd_device::create(cmd_device::CreateRequest {
                path: args.device,
                zones: args.zones,
                zone_size_bytes: args.zone_size,
                zone_capacity_bytes: args.zone_capacity,
                max_open: args.max_open.unwrap_or(args.zones.min(14)),
                max_active: args.max_active,
                lba_bytes: args.lba_size,
                metadata_bytes: args.metadata_bytes,
                write_granularity_bytes: args.write_granularity,
                zone_append_max_bytes: args.zone_append_max,
                force: args.force,
            })?,
            DeviceCommand::Report(args) => cmd_device::report(args.device.device.as_deref(), args.json)?,
            DeviceCommand::Reset(args) => cmd_device::reset(args.device.device.as_deref(), args.zone, args.all)?,
            DeviceCommand::Bench(args) => {
                anyhow::ensure!(args.seconds > 0.0, "--seconds must be positive");
                let device = device_path::open(args.device.device.as_deref())?;
                let options = device_bench::BenchOptions {
                    threads: args
                        .threads
                        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
                    io_bytes: args.io_size,
                    phase_bytes: args.bytes,
                    phase_seconds: args.seconds,
                    json: args.json,
                };
                let bench = device_bench::run(&*device, &options)?;
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&bench)?);
                } else {
                    device_bench::print(&bench);
                }
            }
            DeviceCommand::Check(args) => {
                if !cmd_device::check(args.device.device.as_deref(), args.json)? {
                    return Ok(ExitCode::FAILURE);
                }
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Every allocation of 128 KiB or more gets a mapping of its own, unmapped when freed.
///
/// The pager's per-region tables are large and zeroed (a region the size of the arena:
/// tens of MiB of them per process served) and mostly never touched, so they cost memory
/// only where touched while they come fresh from the kernel. glibc's default raises its
/// mapping threshold to the size of the last mapped block freed (up to 32 MiB), after
/// which such tables come from the heap instead and `calloc` writes their zeroes, every
/// page resident, and kept in a thread's arena after they are freed: a launcher serving a
/// tree of short-lived processes (a shell script's) grew by the size of every region.
/// A fixed threshold keeps the mappings.
fn large_allocations_mapped() {
    #[cfg(target_env = "gnu")]
    // SAFETY: before any thread starts; sets one of glibc's malloc parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

fn main() -> ExitCode {
    // A closed pipe (`znswap device report | head`) ends us quietly, as it does `cat`.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    large_allocations_mapped();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            // The chain, each cause once: many errors say their source in their own
            // message, and a cause already shown above is not repeated.
            let mut shown = error.to_string();
            eprintln!("error: {shown}");
            for cause in error.chain().skip(1) {
                let text = cause.to_string();
                if !shown.contains(&text) {
                    eprintln!("  caused by: {text}");
                    shown.push_str(&text);
                }
            }
            ExitCode::FAILURE
        }
    }
}
