//! §6.2, key-value stores: Fig. 12 (memcached under ETC: p99 latency, throughput and
//! WAF against swap utilization) and Fig. 13 (redis under YCSB-A with the 20/80
//! hotspot: per-core against hot/cold placement, and the lifetime policy znswap adds).
//!
//! Servers run 32 threads on 16 cores (one NUMA node) and are driven closed-loop: each
//! thread serves its next request as soon as the last one is done, so the throughput is
//! the maximum and the latency is the service time at that throughput. The memcached
//! machine's memory equals the swap size (the paper: 512 GiB of each).

use serde_json::json;
use znswap_chart::LineChart;
use znswap_core::PolicyKind;
use znswap_core::PAGE_BYTES;

use super::exec::{run_all, Progress, RunCache};
use super::fig_waf::run_json;
use super::output::{f0, f1, f2, ratio, Comparison, FigureOutput, Table};
use super::scale::{base_config, safety_ns, Scale};
use super::PaperError;
use super::PaperOptions;
use crate::run::{BackendKind, DiscardMode, Phase, RunConfig, RunResult, TenantConfig};
use crate::workloads::WorkSpec;

const SERVER_THREADS: u32 = 32;
const SERVER_CORES: u32 = 16;
/// Fig. 12's back ends per point: block SSD, block SSD + 8-slot TRIM, ZNSwap.
const FIG12_BACKENDS: usize = 3;
/// Fig. 13's back ends per point: block SSD, per-core, hot/cold, lifetime.
const FIG13_BACKENDS: usize = 4;

fn kv_config(
    options: &PaperOptions,
    name: String,
    backend: BackendKind,
    tenant: TenantConfig,
    warmup_swaps: f64,
    measure_swaps: f64,
) -> RunConfig {
    let scale = &options.scale;
    let bytes = |swaps: f64| (scale.kv_swap_pages as f64 * swaps) as u64 * PAGE_BYTES as u64;
    let mut config = base_config(
        scale,
        options.seed,
        name,
        backend,
        vec![tenant],
        Phase::swap_out(bytes(warmup_swaps), safety_ns(bytes(warmup_swaps))),
        Phase::swap_out(bytes(measure_swaps), safety_ns(bytes(measure_swaps))),
    );
    config.swap_pages = scale.kv_swap_pages;
    config.zones = scale.kv_zones;
    config.cpus = SERVER_CORES;
    config
}

fn server(name: &str, work: WorkSpec, pages: u64, memory_pages: u32, request_cpu_ns: u64) -> TenantConfig {
    TenantConfig {
        name: name.into(),
        work,
        pages,
        memory_pages,
        threads: SERVER_THREADS,
        accesses_per_thread: None,
        read_limit_bytes_s: None,
        write_limit_bytes_s: None,
        slot_limit: None,
        request_cpu_ns,
        access_cpu_ns: None,
    }
}

fn kv_table(results: &[RunResult], x_name: &str, xs: &[String]) -> Table {
    let mut table =
        Table::new(&[x_name, "back end", "requests/s", "p50 µs", "p99 µs", "swap-in MiB/s", "WAF", "util %"]);
    for (result, x) in results.iter().zip(xs) {
        table.row(vec![
            x.clone(),
            result.backend.clone(),
            f0(result.requests_per_s),
            f1(result.request_p50_us),
            f1(result.request_p99_us),
            f1(result.swap_in_mib_s),
            f2(result.waf),
            f1(result.utilization * 100.0),
        ]);
    }
    table
}

fn memcached(options: &PaperOptions, cache: &mut RunCache, progress: &Progress) -> Result<Vec<RunResult>, PaperError> {
    let scale = &options.scale;
    let costs = crate::calib::CpuCosts::default();
    let mut configs = Vec::new();
    for &percent in &fig12_points(scale) {
        // Memory as large as the swap, and the store loaded until `percent` of the swap
        // holds what memory cannot.
        let work = WorkSpec::etc(scale.kv_swap_pages * (100 + percent as u64) / 100, options.seed, false)?;
        let pages = work.region_pages(0);
        let memory = pages.saturating_sub(scale.kv_swap_pages * percent as u64 / 100).max(4096);
        for backend in [
            BackendKind::linux(DiscardMode::None),
            BackendKind::linux(DiscardMode::Fine8),
            BackendKind::znswap(PolicyKind::PerCore),
        ] {
            let tenant = server("memcached", work.clone(), pages, memory as u32, costs.memcached_request_ns);
            configs.push(kv_config(options, format!("etc-u{percent}"), backend, tenant, 0.5, 0.3));
        }
    }
    run_all("kv (12)", &configs, options.jobs, cache, progress)
}

fn fig12_points(scale: &Scale) -> Vec<u32> {
    if scale.quick {
        vec![10]
    } else {
        vec![10, 30, 50]
    }
}

fn fig13_points(scale: &Scale) -> Vec<u32> {
    if scale.quick {
        vec![70]
    } else {
        vec![50, 70, 90]
    }
}

fn redis(options: &PaperOptions, cache: &mut RunCache, progress: &Progress) -> Result<Vec<RunResult>, PaperError> {
    let scale = &options.scale;
    let costs = crate::calib::CpuCosts::default();
    // A 320 GiB data set on 512 GiB of swap, scaled.
    let work = WorkSpec::ycsb_a(scale.kv_swap_pages * 320 / 512);
    let pages = work.region_pages(0);
    let mut configs = Vec::new();
    for &percent in &fig13_points(scale) {
        let memory = (pages * (100 - percent as u64) / 100) as u32;
        for backend in [
            BackendKind::linux(DiscardMode::None),
            BackendKind::znswap(PolicyKind::PerCore),
            BackendKind::znswap(PolicyKind::HotCold),
            BackendKind::znswap(PolicyKind::Lifetime),
        ] {
            let tenant = server("redis", work.clone(), pages, memory, costs.redis_request_ns);
            configs.push(kv_config(
                options,
                format!("ycsba-swapped{percent}"),
                backend,
                tenant,
                scale.placement_warmup_swaps,
                scale.measure_swaps,
            ));
        }
    }
    run_all("kv (13)", &configs, options.jobs, cache, progress)
}

pub fn figure_kv(
    options: &PaperOptions,
    cache: &mut RunCache,
    progress: &Progress,
) -> Result<FigureOutput, PaperError> {
    let scale = &options.scale;
    let etc = memcached(options, cache, progress)?;
    let ycsb = redis(options, cache, progress)?;
    let (points12, points13) = (fig12_points(scale), fig13_points(scale));
    let mut comparisons = fig12_comparisons(&etc);
    comparisons.extend(fig13_comparisons(&ycsb, &points13));
    let runs: Vec<serde_json::Value> = etc.iter().chain(&ycsb).map(run_json).collect();
    Ok(FigureOutput {
        id: "kv".into(),
        title: "Fig. 12 and Fig. 13: key-value stores".into(),
        table: figure_table(&etc, &points12, &ycsb, &points13),
        json: json!({ "figure": "kv", "scale": options.scale, "seed": options.seed, "runs": runs }),
        png: fig12_chart(&etc, &points12).render_png(900, 560)?,
        extra_png: vec![("kv-13.png".into(), fig13_chart(&ycsb, &points13).render_png(900, 560)?)],
        comparisons,
        notes: vec![kv_note(scale)],
    })
}

/// Fig. 12 chart: p99 against utilization, throughput on the right.
fn fig12_chart(etc: &[RunResult], points: &[u32]) -> LineChart {
    let title = "Fig. 12: memcached-ETC, p99 latency and throughput at maximum load";
    let mut chart = LineChart::new(title, "swap utilization (%)", "p99 latency (µs)");
    latency_and_throughput(&mut chart, etc, points, FIG12_BACKENDS);
    chart.right_axis_label("thousand requests/s").y_from_zero(true);
    chart
}

fn fig13_chart(ycsb: &[RunResult], points: &[u32]) -> LineChart {
    let mut chart = LineChart::new(
        "Fig. 13: redis-YCSB-A (20/80 hotspot), p99 latency and throughput",
        "working set swapped out (%)",
        "p99 latency (µs)",
    );
    latency_and_throughput(&mut chart, ycsb, points, FIG13_BACKENDS);
    chart.right_axis_label("thousand requests/s").y_from_zero(true);
    chart
}

/// Per back end, its p99 on the left axis and its throughput on the right; `runs` holds
/// `backends` runs per point.
fn latency_and_throughput(chart: &mut LineChart, runs: &[RunResult], points: &[u32], backends: usize) {
    for backend in 0..backends {
        let at = |metric: &dyn Fn(&RunResult) -> f64| -> Vec<(f64, f64)> {
            points.iter().enumerate().map(|(i, &p)| (p as f64, metric(&runs[i * backends + backend]))).collect()
        };
        chart.series(&format!("p99, {}", runs[backend].backend), &at(&|r| r.request_p99_us));
        chart.series_right(&format!("kreq/s, {}", runs[backend].backend), &at(&|r| r.requests_per_s / 1e3));
    }
}

/// Fig. 12's rows, then Fig. 13's.
fn figure_table(etc: &[RunResult], points12: &[u32], ycsb: &[RunResult], points13: &[u32]) -> Table {
    let mut table = kv_table(
        etc,
        "fig / point",
        &points12
            .iter()
            .flat_map(|p| std::iter::repeat_n(format!("12 / util {p} %"), FIG12_BACKENDS))
            .collect::<Vec<_>>(),
    );
    let table13 = kv_table(
        ycsb,
        "fig / point",
        &points13
            .iter()
            .flat_map(|p| std::iter::repeat_n(format!("13 / swapped {p} %"), FIG13_BACKENDS))
            .collect::<Vec<_>>(),
    );
    table.rows.extend(table13.rows);
    table
}

/// Fig. 12 at its first point (10 %): block, block + 8-slot TRIM, ZNSwap.
fn fig12_comparisons(etc: &[RunResult]) -> Vec<Comparison> {
    let (block, trim, zns) = (&etc[0], &etc[1], &etc[2]);
    // A fault is one 4 KiB swap-in: the share of requests that fault says how deep into
    // the faults' tail the requests' p99 reaches.
    let faulting = |run: &RunResult| run.swap_in_mib_s * 256.0 / run.requests_per_s.max(1.0);
    vec![
        Comparison::new(
            "Fig. 12 at 10 %: Block SSD / ZNSwap p99 latency",
            "10x lower on ZNSwap",
            format!(
                "{:.1}x ({} vs {} µs)",
                ratio(block.request_p99_us, zns.request_p99_us),
                f0(block.request_p99_us),
                f0(zns.request_p99_us)
            ),
            ratio(block.request_p99_us, zns.request_p99_us) >= 3.0,
            &format!(
                "{:.1} % of requests fault; fault p50 / p99: Block SSD {} / {} µs, ZNSwap {} / {} µs",
                faulting(block) * 100.0,
                f0(block.fault_p50_us),
                f0(block.fault_p99_us),
                f0(zns.fault_p50_us),
                f0(zns.fault_p99_us)
            ),
        ),
        Comparison::new(
            "Fig. 12 at 10 %: ZNSwap / Block SSD throughput",
            "5x",
            format!("{:.2}x", ratio(zns.requests_per_s, block.requests_per_s)),
            ratio(zns.requests_per_s, block.requests_per_s) >= 2.0,
            "",
        ),
        Comparison::new(
            "Fig. 12 at 10 %: Block SSD WAF",
            "2.5 (ZNSwap: none)",
            format!("{} (ZNSwap {})", f2(block.waf), f2(zns.waf)),
            block.waf >= 2.0 && zns.waf < 1.1,
            "",
        ),
        Comparison::new(
            "Fig. 12 at 10 %: vs Block SSD + 8-slot TRIM (p99, throughput, WAF)",
            "5x lower p99, 1.6x throughput, 1.1x lower WAF",
            format!(
                "{:.1}x, {:.2}x, {:.2}x",
                ratio(trim.request_p99_us, zns.request_p99_us),
                ratio(zns.requests_per_s, trim.requests_per_s),
                ratio(trim.waf, zns.waf)
            ),
            ratio(trim.request_p99_us, zns.request_p99_us) >= 2.0,
            "",
        ),
    ]
}

/// Fig. 13 averaged over its points: per-core (1) against hot/cold (2) and lifetime (3).
fn fig13_comparisons(ycsb: &[RunResult], points: &[u32]) -> Vec<Comparison> {
    let mean = |backend: usize, metric: &dyn Fn(&RunResult) -> f64| {
        (0..points.len()).map(|i| metric(&ycsb[i * FIG13_BACKENDS + backend])).sum::<f64>() / points.len() as f64
    };
    let qps13 = ratio(mean(2, &|r| r.requests_per_s), mean(1, &|r| r.requests_per_s));
    let p99_13 = ratio(mean(1, &|r| r.request_p99_us), mean(2, &|r| r.request_p99_us));
    let waf13 = ratio(mean(1, &|r| r.waf), mean(2, &|r| r.waf));
    let lifetime_qps = ratio(mean(3, &|r| r.requests_per_s), mean(1, &|r| r.requests_per_s));
    let lifetime_p99 = ratio(mean(1, &|r| r.request_p99_us), mean(3, &|r| r.request_p99_us));
    let lifetime_waf = ratio(mean(1, &|r| r.waf), mean(3, &|r| r.waf));
    vec![
        Comparison::new(
            "Fig. 13: hot/cold / per-core throughput",
            "1.27x",
            format!("{qps13:.2}x"),
            qps13 >= 1.1,
            "mean over the points",
        ),
        Comparison::new(
            "Fig. 13: per-core / hot/cold p99 latency",
            "1.4x",
            format!("{p99_13:.2}x"),
            p99_13 >= 1.1,
            "mean over the points",
        ),
        Comparison::new(
            "Fig. 13: per-core / hot/cold WAF",
            "1.1x",
            format!("{waf13:.2}x"),
            waf13 >= 1.03,
            "mean over the points",
        ),
        Comparison::new(
            "Fig. 13: lifetime (new) vs per-core: throughput, p99 (per-core / lifetime), WAF (per-core / lifetime)",
            "hot/cold: 1.27x, 1.4x, 1.1x",
            format!("{lifetime_qps:.2}x, {lifetime_p99:.2}x, {lifetime_waf:.2}x"),
            lifetime_qps >= 1.1 && lifetime_waf >= 1.03,
            "mean over the points",
        ),
    ]
}

/// The set-up both figures share.
fn kv_note(scale: &Scale) -> String {
    format!(
        "kv: {SERVER_THREADS} server threads on {SERVER_CORES} cores, closed loop (latency = service time at maximum \
         throughput, no network); memcached keys uniform over the records (the paper's popular keys are \
         scattered so that memory accesses are mostly uniform); request CPU {} µs (memcached) and {} µs (redis) assumed; the key-value swap is \
         {:.2} GiB.",
        crate::calib::CpuCosts::default().memcached_request_ns as f64 / 1e3,
        crate::calib::CpuCosts::default().redis_request_ns as f64 / 1e3,
        scale.kv_swap_pages as f64 / (1u64 << 18) as f64
    )
}
