//! §6.1.4, raw swap-out: `case-anon-w-seq-mt` writes its set once, sequentially, in a
//! small memory, never reusing a page nor filling the device, so neither GC nor
//! swap-in runs: the swap software's own cost on 1, 2, 4, 8 cores.

use serde_json::json;
use znswap_chart::LineChart;
use znswap_core::{PolicyKind, PAGE_BYTES};
use znswap_workload::Workload;

use super::exec::{run_all, Progress, RunCache};
use super::fig_waf::run_json;
use super::output::{f1, Comparison, FigureOutput, Table};
use super::scale::{base_config, page_tenant, safety_ns};
use super::PaperError;
use super::PaperOptions;
use crate::run::{BackendKind, DiscardMode, Phase, RunConfig};

pub fn figure_raw(
    options: &PaperOptions,
    cache: &mut RunCache,
    progress: &Progress,
) -> Result<FigureOutput, PaperError> {
    let scale = &options.scale;
    let cores: Vec<u32> = if scale.quick { vec![1, 4] } else { vec![1, 2, 4, 8] };
    let backends = [BackendKind::znswap(PolicyKind::PerCore), BackendKind::linux(DiscardMode::None)];
    let memory = scale.cgroup_memory_pages();
    // Half the swap: enough to measure, far from filling the device.
    let pages = scale.swap_pages / 2;
    let configs: Vec<RunConfig> = cores
        .iter()
        .flat_map(|&count| backends.iter().map(move |&backend| (count, backend)))
        .map(|(count, backend)| {
            let mut tenant = page_tenant("vm-scalability", Workload::AnonWSeq, pages, memory, count);
            tenant.accesses_per_thread = Some(pages / count as u64);
            let bytes = pages * PAGE_BYTES as u64;
            let mut config = base_config(
                scale,
                options.seed,
                format!("wseq-cores{count}"),
                backend,
                vec![tenant],
                // Past the first fill of memory.
                Phase::swap_out(scale.swap_bytes(0.02), safety_ns(bytes)),
                // Until every thread has written its slice.
                Phase::time(safety_ns(bytes)),
            );
            config.cpus = count;
            // A freshly formatted device: no device GC either.
            config.precondition = false;
            config
        })
        .collect();
    let results = run_all("raw", &configs, options.jobs, cache, progress)?;
    let get =
        |count: u32, backend: usize| &results[cores.iter().position(|&c| c == count).expect("cores") * 2 + backend];
    let title = "§6.1.4: raw swap-out bandwidth (sequential writes, no GC, no swap-in)";
    let mut chart = LineChart::new(title, "cores (one thread each)", "swap-out MiB/s");
    for (index, backend) in backends.iter().enumerate() {
        let curve: Vec<(f64, f64)> = cores.iter().map(|&c| (c as f64, get(c, index).swap_out_mib_s)).collect();
        chart.series(&backend.label(), &curve);
    }
    chart.reference_line(1024.0, "device write bandwidth (1 GiB/s)");
    chart.y_from_zero(true);
    let mut table = Table::new(&["cores", "back end", "swap-out MiB/s", "CPU busy %"]);
    for &count in &cores {
        for index in 0..backends.len() {
            let result = get(count, index);
            let busy = (result.host.cpu_app_ns + result.host.cpu_kswapd_ns + result.host.cpu_reclaim_direct_ns) as f64
                / (result.window_s * 1e9 * count as f64)
                * 100.0;
            table.row(vec![count.to_string(), result.backend.clone(), f1(result.swap_out_mib_s), f1(busy)]);
        }
    }
    let one = get(1, 0).swap_out_mib_s;
    let four = get(4, 0).swap_out_mib_s;
    let comparisons = vec![
        Comparison::new(
            "ZNSwap swap-out on one core",
            "740 MiB/s",
            format!("{} MiB/s", f1(one)),
            (one - 740.0).abs() < 0.1 * 740.0,
            "calibrated: swap_out_ns is derived from this number",
        ),
        Comparison::new(
            "ZNSwap swap-out on four cores",
            "1 GiB/s (the device's maximum)",
            format!("{} MiB/s", f1(four)),
            four > 0.85 * 1024.0,
            "emerges from the NAND model's program bandwidth",
        ),
        Comparison::new(
            "ZNSwap vs Linux swap, one core",
            "the same",
            format!("{} vs {} MiB/s", f1(one), f1(get(1, 1).swap_out_mib_s)),
            (one / get(1, 1).swap_out_mib_s - 1.0).abs() < 0.1,
            "",
        ),
    ];
    let runs: Vec<serde_json::Value> = results.iter().map(run_json).collect();
    Ok(FigureOutput {
        id: "raw".into(),
        title: title.into(),
        table,
        json: json!({ "figure": "raw", "title": title, "scale": options.scale, "seed": options.seed, "runs": runs }),
        png: chart.render_png(900, 560)?,
        extra_png: Vec::new(),
        comparisons,
        notes: vec!["raw: the set is half the swap (the paper: 500 GiB on a 512 GiB swap), one thread per core.".into()],
    })
}
