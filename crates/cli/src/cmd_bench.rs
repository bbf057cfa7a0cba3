//! `znswap bench`: its flags, the pager's configuration they make, and the run on the
//! pager (`swap_bench::run`) or on the kernel's own swap (`swap_bench::run_kernel`).

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use znswap_pager::PagerConfig;
use znswap_workload::Workload;
use znswap_zoned::FaultSpec;

use crate::device_path;
use crate::flags::{size, DeviceFlag, JsonFlag, MemoryFlag, PagerFlags};
use crate::swap_bench;

#[derive(Args)]
pub struct SwapBenchArgs {
    #[command(flatten)]
    device: DeviceFlag,
    /// anon-w-rand (random writes), anon-w-seq (sequential writes), anon-r-rand (fill,
    /// then random reads), pmbench (normal, sigma = set/12), hotspot (80 % on 20 %).
    #[arg(long, default_value = "anon-w-rand", value_parser = workload)]
    workload: Workload,
    #[command(flatten)]
    memory: MemoryFlag,
    /// Working set [default: four times --memory].
    #[arg(long, value_parser = size)]
    wss: Option<u64>,
    /// Threads running the workload, each on its own slice of the working set
    /// [default: the number of CPUs].
    #[arg(long)]
    threads: Option<usize>,
    #[command(flatten)]
    pager: PagerFlags,
    /// Threads picking and snapshotting pages to evict.
    #[arg(long, default_value_t = 1)]
    evictor_threads: usize,
    /// Threads running the device I/O of swap-out and GC (one request in flight each).
    #[arg(long, default_value_t = 1)]
    io_threads: usize,
    /// Pages evicted per round, written together
    ///
    /// One append per swap-zone, up to the device's append limit; eviction starts this
    /// many pages below the budget. Rounds grow to 4 batches while the victims are
    /// contiguous and nothing is swapped in.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    evict_batch: u32,
    /// Pages a fault may install above the budget before it waits for the evictor
    /// [default: 1024, or an eighth of a budget under 32 MiB]
    ///
    /// Pages on their way to the device still count as resident, so this bounds how much
    /// swap-out is in flight.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=1 << 20))]
    slack: Option<u64>,
    /// Seconds the workload runs.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Start the clock at once instead of after writing every page once
    ///
    /// The warm-up makes random workloads measure steady-state swapping rather than first
    /// touches; anon-w-seq and anon-r-rand never warm up.
    #[arg(long)]
    no_warm_up: bool,
    /// Accesses (all threads together) run after the first writes and before the clock
    /// starts
    ///
    /// The GC's steady state comes only after the device has been rewritten a few times;
    /// use this so the figures (WAF above all) leave that transient out. Accesses are
    /// verified all the same.
    #[arg(long, default_value_t = 0)]
    warm_up_ops: u64,
    /// Stop after this many accesses (all threads together).
    #[arg(long)]
    ops: Option<u64>,
    /// Seed of the access streams.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds spent measuring each of the device's limits first.
    #[arg(long, default_value_t = 2.0)]
    ceiling_seconds: f64,
    /// Run the same workload on plain memory paged by the kernel's own swap instead
    ///
    /// For comparisons: run it inside a memory cgroup limited to the budget, as
    /// scripts/kernel-swap-compare.sh does. No device is used.
    #[arg(long)]
    kernel_swap: bool,
    /// Inject device faults into the pager's commands: KEY=VALUE pairs such as
    /// read=0.01,append=0.01,offline=2
    ///
    /// read, write, append, reset and slow are probabilities per command (failed
    /// commands, completions delayed up to slow-us µs); offline zones go offline during
    /// the run, offline-after commands apart on average; seed fixes every decision. The
    /// device's own limits are measured without them. Pages lost with an offline zone are
    /// then expected and counted: the run fails only if a page reads back wrong.
    #[arg(long, value_name = "SPEC", value_parser = fault_spec, conflicts_with = "kernel_swap")]
    inject_faults: Option<FaultSpec>,
    #[command(flatten)]
    json: JsonFlag,
}

fn fault_spec(text: &str) -> Result<FaultSpec, String> {
    text.parse().map_err(|error: znswap_zoned::FaultSpecError| error.to_string())
}

fn workload(name: &str) -> Result<Workload, String> {
    Workload::from_name(name)
        .ok_or_else(|| format!("unknown workload {name:?}: use one of {}", Workload::NAMES.join(", ")))
}

/// The pager's configuration for the bench: its defaults (`PagerConfig::for_bench`,
/// self-paging unless `--handler-threads` is given) and what the flags change.
fn pager_config(args: &SwapBenchArgs) -> PagerConfig {
    // The compressed pool is part of --memory: the paged memory's budget is the rest.
    let pool = args.pager.compressed_pool.compressed_pool;
    let mut config = PagerConfig::for_bench(args.memory.memory.saturating_sub(pool));
    args.pager.apply(&mut config);
    config.evictor_threads = args.evictor_threads.max(1);
    config.io_threads = args.io_threads.max(1);
    config.core.evict_batch_pages = args.evict_batch as usize;
    if let Some(slack) = args.slack {
        config.core.slack_pages = slack;
    }
    config
}

pub fn run(args: SwapBenchArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        args.seconds > 0.0 && args.ceiling_seconds > 0.0,
        "--seconds and --ceiling-seconds must be positive"
    );
    znswap_pager::check_compressed_pool_share(args.memory.memory, args.pager.compressed_pool.compressed_pool)?;
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())).max(1);
    let options = swap_bench::SwapBenchOptions {
        workload: args.workload,
        pager: pager_config(&args),
        wss_bytes: args.wss.unwrap_or(4 * args.memory.memory),
        threads,
        seconds: args.seconds,
        ops_max: args.ops.unwrap_or(u64::MAX),
        warm_up_ops: args.warm_up_ops,
        seed: args.seed,
        ceiling_seconds: args.ceiling_seconds,
        warm_up: !args.no_warm_up,
        inject_faults: args.inject_faults,
        json: args.json.json,
    };
    if args.kernel_swap {
        let bench = swap_bench::run_kernel(&options)?;
        if options.json {
            println!("{}", serde_json::to_string_pretty(&bench)?);
        } else {
            println!(
                "{} on kernel swap: {:.0} ops/s, swap-in {:.0} MiB/s, swap-out {:.0} MiB/s, fault p50 {:.1} µs p99 {:.1} \
                 µs, {} pages verified, {} corrupted",
                bench.workload,
                bench.ops_per_s,
                bench.swap_in_mib_s,
                bench.swap_out_mib_s,
                bench.fault_p50_us,
                bench.fault_p99_us,
                bench.pages_verified,
                bench.corrupted
            );
        }
        return Ok(if bench.corrupted > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS });
    }
    let device: std::sync::Arc<dyn znswap_zoned::ZonedDevice> =
        device_path::open(args.device.device.as_deref())?.into();
    let device_name = args.device.device.unwrap_or_else(device_path::default_path);
    swap_bench::reset_earlier_run(&*device, &device_name.display().to_string())?;
    let bench = swap_bench::run(device, &options)?;
    if options.json {
        println!("{}", serde_json::to_string_pretty(&bench)?);
    } else {
        swap_bench::print(&bench);
    }
    // Injected faults lose pages on purpose; a page read back wrong is never right.
    let lost_is_failure = options.inject_faults.is_none() && bench.lost_pages > 0;
    if bench.corrupted > 0 || lost_is_failure {
        eprintln!("error: {} pages read back wrong and {} were lost", bench.corrupted, bench.lost_pages);
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
