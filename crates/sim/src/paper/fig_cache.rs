//! The swap cache (§3.1.2): Fig. 3 (random reads against utilization) and Fig. 4
//! (the swap reclamation cutoff at 80 % utilization, reads and a read/write mix).

use serde_json::json;
use znswap_chart::LineChart;
use znswap_core::{PolicyKind, SwapCacheMode};
use znswap_workload::Workload;

use super::exec::{run_all, Progress, RunCache};
use super::fig_waf::run_json;
use super::output::{f1, f2, ratio, Comparison, FigureOutput, Table};
use super::scale::{base_config, page_tenant, swap_in_phase, swap_out_phase};
use super::PaperError;
use super::PaperOptions;
use crate::run::{BackendKind, DiscardMode, RunConfig, RunResult};

/// Uniform reads and writes half and half (the paper's "mixed" workload).
const MIXED: Workload = Workload::Hotspot { hot_percent: 100, hot_access_percent: 100, read_percent: 50 };

pub fn figure_3(options: &PaperOptions, cache: &mut RunCache, progress: &Progress) -> Result<FigureOutput, PaperError> {
    let scale = &options.scale;
    let points: Vec<u32> = if scale.quick { vec![30, 70] } else { vec![10, 30, 50, 60, 70, 90] };
    let backends = [BackendKind::linux(DiscardMode::None), BackendKind::znswap(PolicyKind::PerCore)];
    let memory = scale.cgroup_memory_pages();
    let configs: Vec<RunConfig> = points
        .iter()
        .flat_map(|&percent| backends.iter().map(move |&backend| (percent, backend)))
        .map(|(percent, backend)| {
            let pages = scale.swap_pages * percent as u64 / 100 + memory as u64;
            let tenant = page_tenant("vm-scalability", Workload::AnonRRand, pages, memory, scale.threads);
            // The warm-up holds the fill (every page written once) and some reads.
            base_config(
                scale,
                options.seed,
                format!("rrand-u{percent}"),
                backend,
                vec![tenant],
                swap_in_phase(scale, 0.3 * scale.warmup_swaps),
                swap_in_phase(scale, scale.measure_swaps * 0.5),
            )
        })
        .collect();
    let results = run_all("3", &configs, options.jobs, cache, progress)?;
    let get = |percent: u32, backend: usize| -> &RunResult {
        &results[points.iter().position(|&p| p == percent).expect("point") * backends.len() + backend]
    };
    let title = "Fig. 3: swap-in bandwidth of random reads against swap utilization";
    let mut chart = LineChart::new(title, "swap utilization (%)", "swap-in MiB/s");
    let mut table =
        Table::new(&["util %", "back end", "swap-in MiB/s", "swap-out MiB/s", "WAF", "clean evictions %", "corrupted"]);
    for (index, backend) in backends.iter().enumerate() {
        let curve: Vec<(f64, f64)> = points.iter().map(|&p| (p as f64, get(p, index).swap_in_mib_s)).collect();
        chart.series(&backend.label(), &curve);
    }
    let waf: Vec<(f64, f64)> = points.iter().map(|&p| (p as f64, writes_per_swap_in(get(p, 0)))).collect();
    chart.series_right("Block SSD: media writes per swap-in", &waf);
    chart.right_axis_label("pages written per swap-in").y_from_zero(true);
    for &percent in &points {
        for index in 0..backends.len() {
            let result = get(percent, index);
            let evictions = result.host.swap_out_writes + result.host.swap_out_clean;
            table.row(vec![
                percent.to_string(),
                result.backend.clone(),
                f1(result.swap_in_mib_s),
                f1(result.swap_out_mib_s),
                f2(result.waf),
                f1(ratio(result.host.swap_out_clean as f64, evictions.max(1) as f64) * 100.0),
                result.corrupted.to_string(),
            ]);
        }
    }
    let (low, high) = (points[0], *points.last().expect("points"));
    let block_slowdown = ratio(get(low, 0).swap_in_mib_s, get(high, 0).swap_in_mib_s);
    let zns_slowdown = ratio(get(low, 1).swap_in_mib_s, get(high, 1).swap_in_mib_s);
    let comparisons = vec![
        Comparison::new(
            &format!("Block SSD swap-in slowdown, {low} % → {high} %"),
            "6.9x above 50 %",
            format!("{block_slowdown:.1}x"),
            block_slowdown >= 3.0,
            "",
        ),
        Comparison::new(
            &format!("Block SSD WAF at {high} %"),
            "2.5x above 50 %",
            f2(get(high, 0).waf),
            get(high, 0).waf >= 1.8,
            "WAF of the writes the lost swap cache causes",
        ),
        Comparison::new(
            &format!("ZNSwap swap-in slowdown, {low} % → {high} %"),
            "none (§6.1.1: matches the ideal)",
            format!("{zns_slowdown:.2}x"),
            zns_slowdown < 1.5,
            "",
        ),
    ];
    let runs: Vec<serde_json::Value> = results.iter().map(run_json).collect();
    Ok(FigureOutput {
        id: "3".into(),
        title: title.into(),
        table,
        json: json!({ "figure": "3", "title": title, "scale": options.scale, "seed": options.seed, "runs": runs }),
        png: chart.render_png(900, 560)?,
        extra_png: Vec::new(),
        comparisons,
        notes: vec![],
    })
}

/// Media pages written per page swapped in: what losing the swap cache costs.
fn writes_per_swap_in(result: &RunResult) -> f64 {
    ratio(result.device.media_pages_written as f64, result.host.swap_ins.max(1) as f64)
}

pub fn figure_4(options: &PaperOptions, cache: &mut RunCache, progress: &Progress) -> Result<FigureOutput, PaperError> {
    let scale = &options.scale;
    let cutoffs: Vec<u32> = if scale.quick { vec![50, 90] } else { vec![30, 50, 70, 90] };
    // The working set is 80 % of the swap and half of it fits in memory: with every
    // swapped-in page kept as swap cache, 80 % of the slots are in use.
    let pages = scale.swap_pages * 80 / 100;
    let memory = (pages / 2) as u32;
    let read = |backend: BackendKind, cutoff: u32| {
        let tenant = page_tenant("reads", Workload::AnonRRand, pages, memory, scale.threads);
        base_config(
            scale,
            options.seed,
            format!("cutoff{cutoff}-reads"),
            backend,
            vec![tenant],
            swap_in_phase(scale, 0.3 * scale.warmup_swaps),
            swap_in_phase(scale, scale.measure_swaps * 0.5),
        )
    };
    let mixed = |backend: BackendKind, cutoff: u32| {
        let tenant = page_tenant("mixed", MIXED, pages, memory, scale.threads);
        base_config(
            scale,
            options.seed,
            format!("cutoff{cutoff}-mixed"),
            backend,
            vec![tenant],
            swap_out_phase(scale, scale.warmup_swaps),
            swap_out_phase(scale, scale.measure_swaps),
        )
    };
    let with_cutoff =
        |discard: DiscardMode, cutoff: u32| BackendKind::Linux { discard, swap_full_cutoff: cutoff as f64 / 100.0 };
    let mut configs = Vec::new();
    for &cutoff in &cutoffs {
        configs.push(read(with_cutoff(DiscardMode::None, cutoff), cutoff));
        configs.push(mixed(with_cutoff(DiscardMode::None, cutoff), cutoff));
        configs.push(mixed(with_cutoff(DiscardMode::Fine8, cutoff), cutoff));
    }
    let zns = BackendKind::Znswap { policy: PolicyKind::PerCore, gc_streams: 1, swap_cache: SwapCacheMode::Adaptive };
    configs.push(read(zns, 0));
    configs.push(mixed(zns, 0));
    let results = run_all("4", &configs, options.jobs, cache, progress)?;
    let at = |cutoff_index: usize, kind: usize| &results[cutoff_index * 3 + kind];
    let (zns_read, zns_mixed) = (&results[results.len() - 2], &results[results.len() - 1]);
    let title = "Fig. 4: swap reclamation cutoff at 80 % utilization";
    let mut chart = LineChart::new(title, "swap reclamation cutoff (%)", "MiB/s");
    let curve = |kind: usize, metric: &dyn Fn(&RunResult) -> f64| -> Vec<(f64, f64)> {
        cutoffs.iter().enumerate().map(|(index, &cutoff)| (cutoff as f64, metric(at(index, kind)))).collect()
    };
    chart.series("reads: swap-in, Block SSD", &curve(0, &|r| r.swap_in_mib_s));
    chart.series("mixed: swap-out, Block SSD", &curve(1, &|r| r.swap_out_mib_s));
    chart.series("mixed: swap-out, Block SSD + 8-slot TRIM", &curve(2, &|r| r.swap_out_mib_s));
    chart.reference_line(zns_read.swap_in_mib_s, "ZNSwap reads (no cutoff)");
    chart.reference_line(zns_mixed.swap_out_mib_s, "ZNSwap mixed (no cutoff)");
    chart.y_from_zero(true);
    let mut table = Table::new(&["cutoff %", "workload", "back end", "swap-in MiB/s", "swap-out MiB/s", "WAF"]);
    for (index, &cutoff) in cutoffs.iter().enumerate() {
        for (kind, workload) in ["reads", "mixed", "mixed"].iter().enumerate() {
            let result = at(index, kind);
            table.row(vec![
                cutoff.to_string(),
                workload.to_string(),
                result.backend.clone(),
                f1(result.swap_in_mib_s),
                f1(result.swap_out_mib_s),
                f2(result.waf),
            ]);
        }
    }
    for (workload, result) in [("reads", zns_read), ("mixed", zns_mixed)] {
        table.row(vec![
            "none".into(),
            workload.into(),
            result.backend.clone(),
            f1(result.swap_in_mib_s),
            f1(result.swap_out_mib_s),
            f2(result.waf),
        ]);
    }
    let last = cutoffs.len() - 1;
    let best_read = (0..cutoffs.len()).map(|index| at(index, 0).swap_in_mib_s).fold(0.0, f64::max);
    let best_mixed = (0..cutoffs.len()).map(|index| at(index, 2).swap_out_mib_s).fold(0.0, f64::max);
    let comparisons = vec![
        Comparison::new(
            "Block SSD reads: swap-in bandwidth, lowest → highest cutoff",
            "rises with the cutoff",
            format!("{} → {} MiB/s", f1(at(0, 0).swap_in_mib_s), f1(at(last, 0).swap_in_mib_s)),
            at(last, 0).swap_in_mib_s > 1.2 * at(0, 0).swap_in_mib_s,
            "",
        ),
        Comparison::new(
            "Block SSD + 8-slot TRIM mixed: swap-out, lowest → highest cutoff",
            "falls with the cutoff (smaller cutoffs preferable)",
            format!("{} → {} MiB/s", f1(at(0, 2).swap_out_mib_s), f1(at(last, 2).swap_out_mib_s)),
            at(0, 2).swap_out_mib_s > at(last, 2).swap_out_mib_s,
            "",
        ),
        Comparison::new(
            "ZNSwap vs the best Block SSD cutoff, reads",
            "on the \"ideal\" line (§6.1.1)",
            format!("{} vs {} MiB/s", f1(zns_read.swap_in_mib_s), f1(best_read)),
            zns_read.swap_in_mib_s >= 0.9 * best_read,
            "",
        ),
        Comparison::new(
            "ZNSwap vs the best Block SSD cutoff, mixed",
            "on the \"ideal\" line (§6.1.1)",
            format!("{} vs {} MiB/s", f1(zns_mixed.swap_out_mib_s), f1(best_mixed)),
            zns_mixed.swap_out_mib_s >= 0.9 * best_mixed,
            "",
        ),
    ];
    let runs: Vec<serde_json::Value> = results.iter().map(run_json).collect();
    Ok(FigureOutput {
        id: "4".into(),
        title: title.into(),
        table,
        json: json!({ "figure": "4", "title": title, "scale": options.scale, "seed": options.seed, "runs": runs }),
        png: chart.render_png(900, 560)?,
        extra_png: Vec::new(),
        comparisons,
        notes: vec![
            "Fig. 4's cutoff is applied around the Linux model's fixed 50 % vm_swap_full rule (see the crate README)."
                .into(),
        ],
    })
}
