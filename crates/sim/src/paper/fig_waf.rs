//! Random-write swap (vm-scalability `case-anon-w-rand-mt`): Fig. 1 and Fig. 10
//! (bandwidth and WAF against swap utilization) and Fig. 2 (bandwidth over time with
//! the TRIM modes).

use serde_json::json;
use znswap_chart::LineChart;
use znswap_core::PolicyKind;
use znswap_workload::Workload;

use super::exec::{run_all, Progress, RunCache};
use super::output::{f1, f2, ratio, Comparison, FigureOutput, Table};
use super::scale::{base_config, page_tenant, swap_out_phase, Scale};
use super::PaperError;
use super::PaperOptions;
use crate::events::SECOND_NS;
use crate::run::{BackendKind, DiscardMode, Phase, RunConfig, RunResult};

fn utilizations(scale: &Scale) -> Vec<u32> {
    if scale.quick {
        vec![10, 50, 80]
    } else {
        vec![10, 20, 30, 40, 50, 60, 70, 80]
    }
}

/// The Fig. 1 / Fig. 10 run: random writes over a working set whose swapped part is
/// `percent` of the swap.
fn wrand_config(options: &PaperOptions, percent: u32, backend: BackendKind) -> RunConfig {
    let scale = &options.scale;
    let memory = scale.cgroup_memory_pages();
    let pages = scale.swap_pages * percent as u64 / 100 + memory as u64;
    let tenant = page_tenant("vm-scalability", Workload::AnonWRand, pages, memory, scale.threads);
    base_config(
        scale,
        options.seed,
        format!("wrand-u{percent}"),
        backend,
        vec![tenant],
        swap_out_phase(scale, scale.warmup_swaps),
        swap_out_phase(scale, scale.measure_swaps),
    )
}

struct Sweep {
    points: Vec<u32>,
    backends: Vec<BackendKind>,
    results: Vec<RunResult>,
}

impl Sweep {
    fn run(
        figure: &str,
        options: &PaperOptions,
        backends: Vec<BackendKind>,
        cache: &mut RunCache,
        progress: &Progress,
    ) -> Result<Sweep, PaperError> {
        let points = utilizations(&options.scale);
        let configs: Vec<RunConfig> = points
            .iter()
            .flat_map(|&percent| backends.iter().map(move |&backend| (percent, backend)))
            .map(|(percent, backend)| wrand_config(options, percent, backend))
            .collect();
        let results = run_all(figure, &configs, options.jobs, cache, progress)?;
        Ok(Sweep { points, backends, results })
    }

    fn get(&self, percent: u32, backend: usize) -> &RunResult {
        let point = self.points.iter().position(|&p| p == percent).expect("a swept point");
        &self.results[point * self.backends.len() + backend]
    }

    fn curve(&self, backend: usize, metric: impl Fn(&RunResult) -> f64) -> Vec<(f64, f64)> {
        self.points.iter().map(|&percent| (percent as f64, metric(self.get(percent, backend)))).collect()
    }

    fn table(&self) -> Table {
        let mut table = Table::new(&[
            "util %",
            "back end",
            "swap-out MiB/s",
            "swap-in MiB/s",
            "WAF",
            "device WAF",
            "ZNGC CPU %",
            "TRIM CPU %",
            "fault p99 µs",
            "corrupted",
        ]);
        for &percent in &self.points {
            for backend in 0..self.backends.len() {
                let result = self.get(percent, backend);
                table.row(vec![
                    percent.to_string(),
                    result.backend.clone(),
                    f1(result.swap_out_mib_s),
                    f1(result.swap_in_mib_s),
                    f2(result.waf),
                    f2(result.device_waf),
                    f2(result.gc_cpu_percent),
                    f2(result.trim_cpu_percent),
                    f1(result.fault_p99_us),
                    result.corrupted.to_string(),
                ]);
            }
        }
        table
    }

    fn json(&self, id: &str, title: &str, options: &PaperOptions) -> serde_json::Value {
        let runs: Vec<serde_json::Value> = self.results.iter().map(run_json).collect();
        json!({ "figure": id, "title": title, "scale": options.scale, "seed": options.seed, "runs": runs })
    }
}

/// A run's numbers without its time series (kept small).
pub(super) fn run_json(result: &RunResult) -> serde_json::Value {
    let mut value = serde_json::to_value(result).expect("results serialize");
    value.as_object_mut().expect("an object").remove("series");
    value
}

pub fn figure_10(
    options: &PaperOptions,
    cache: &mut RunCache,
    progress: &Progress,
) -> Result<FigureOutput, PaperError> {
    let backends = vec![
        BackendKind::linux(DiscardMode::None),
        BackendKind::linux(DiscardMode::Fine8),
        BackendKind::znswap(PolicyKind::PerCore),
    ];
    let sweep = Sweep::run("10", options, backends, cache, progress)?;
    let title = "Fig. 10: swap-out bandwidth, random writes (vm-scalability anon-w-rand)";
    let mut chart = LineChart::new(title, "swap utilization (%)", "swap-out MiB/s");
    for (index, backend) in sweep.backends.iter().enumerate() {
        chart.series(&backend.label(), &sweep.curve(index, |r| r.swap_out_mib_s));
    }
    chart.series_right("WAF, Block SSD", &sweep.curve(0, |r| r.waf));
    chart.series_right("WAF, ZNSwap", &sweep.curve(2, |r| r.waf));
    chart.right_axis_label("WAF").y_from_zero(true);
    let last = *sweep.points.last().expect("points");
    let (block, trim, zns) = (sweep.get(50, 0), sweep.get(50, 1), sweep.get(50, 2));
    let comparisons = vec![
        Comparison::new(
            "ZNSwap / Block SSD swap-out bandwidth at 50 %",
            "≈ 2x",
            format!(
                "{:.2}x ({} vs {} MiB/s)",
                ratio(zns.swap_out_mib_s, block.swap_out_mib_s),
                f1(zns.swap_out_mib_s),
                f1(block.swap_out_mib_s)
            ),
            ratio(zns.swap_out_mib_s, block.swap_out_mib_s) >= 1.5,
            "",
        ),
        Comparison::new(
            "Block SSD / ZNSwap WAF at 50 %",
            "≈ 2x lower on ZNSwap",
            format!("{:.2}x ({} vs {})", ratio(block.waf, zns.waf), f2(block.waf), f2(zns.waf)),
            ratio(block.waf, zns.waf) >= 1.5,
            "",
        ),
        Comparison::new(
            "ZNSwap vs Block SSD + 8-slot TRIM at 50 %",
            "ZNSwap higher",
            format!("{} vs {} MiB/s", f1(zns.swap_out_mib_s), f1(trim.swap_out_mib_s)),
            zns.swap_out_mib_s > trim.swap_out_mib_s,
            "",
        ),
        Comparison::new(
            "ZNGC CPU at 10 %",
            "0.3 % of a core",
            format!("{} %", f2(sweep.get(10, 2).gc_cpu_percent)),
            sweep.get(10, 2).gc_cpu_percent < 2.0,
            "calibrated (gc_slot_scanned_ns)",
        ),
        Comparison::new(
            &format!("ZNGC CPU at {last} %"),
            "15 % of a core (at 80 %)",
            format!("{} %", f2(sweep.get(last, 2).gc_cpu_percent)),
            (5.0..40.0).contains(&sweep.get(last, 2).gc_cpu_percent),
            "calibrated (gc_page_moved_ns) at an assumed 250 MiB/s",
        ),
        {
            let trim: Vec<f64> = sweep.points.iter().map(|&p| sweep.get(p, 1).trim_cpu_percent).collect();
            let (low, high) = (trim.iter().cloned().fold(f64::MAX, f64::min), trim.iter().cloned().fold(0.0, f64::max));
            Comparison::new(
                "8-slot TRIM dispatch CPU over the sweep",
                "32 % of a core",
                format!("{} % to {} %", f1(low), f1(high)),
                low <= 32.0 && 32.0 <= high * 1.5,
                "calibrated (trim_ns) at an assumed 250 MiB/s; TRIMs only come while 8-slot groups empty out",
            )
        },
    ];
    Ok(FigureOutput {
        id: "10".into(),
        title: title.into(),
        table: sweep.table(),
        json: sweep.json("10", title, options),
        png: chart.render_png(900, 560)?,
        extra_png: Vec::new(),
        comparisons,
        notes: vec![],
    })
}

pub fn figure_1(options: &PaperOptions, cache: &mut RunCache, progress: &Progress) -> Result<FigureOutput, PaperError> {
    let backends = vec![BackendKind::linux(DiscardMode::None), BackendKind::znswap(PolicyKind::PerCore)];
    let sweep = Sweep::run("1", options, backends, cache, progress)?;
    let title = "Fig. 1: swap-out bandwidth and WAF, random writes";
    let mut chart = LineChart::new(title, "swap utilization (%)", "swap-out MiB/s");
    chart.series("Linux swap, Block SSD", &sweep.curve(0, |r| r.swap_out_mib_s));
    chart.series("ZNSwap, ZNS SSD", &sweep.curve(1, |r| r.swap_out_mib_s));
    chart.series_right("WAF, Block SSD", &sweep.curve(0, |r| r.waf));
    chart.series_right("WAF, ZNSwap", &sweep.curve(1, |r| r.waf));
    chart.right_axis_label("WAF").y_from_zero(true);
    let last = *sweep.points.last().expect("points");
    let (block10, zns10) = (sweep.get(10, 0), sweep.get(10, 1));
    let block_last = sweep.get(last, 0);
    let comparisons = vec![
        Comparison::new("Block SSD WAF at 10 % utilization", "2.4-2.5", f2(block10.waf), block10.waf >= 2.0, ""),
        Comparison::new("ZNSwap WAF at 10 %", "1.0", f2(zns10.waf), zns10.waf < 1.05, ""),
        Comparison::new(
            &format!("Block SSD bandwidth, 10 % → {last} %"),
            "drops drastically beyond 20 %",
            format!("{} → {} MiB/s", f1(block10.swap_out_mib_s), f1(block_last.swap_out_mib_s)),
            block_last.swap_out_mib_s < 0.6 * block10.swap_out_mib_s,
            "",
        ),
        Comparison::new(
            "ZNSwap vs Block SSD bandwidth at 10 %",
            "ZNSwap higher (device WA lower)",
            format!("{} vs {} MiB/s", f1(zns10.swap_out_mib_s), f1(block10.swap_out_mib_s)),
            zns10.swap_out_mib_s > block10.swap_out_mib_s,
            "",
        ),
    ];
    Ok(FigureOutput {
        id: "1".into(),
        title: title.into(),
        table: sweep.table(),
        json: sweep.json("1", title, options),
        png: chart.render_png(900, 560)?,
        extra_png: Vec::new(),
        comparisons,
        notes: vec![],
    })
}

pub fn figure_2(options: &PaperOptions, cache: &mut RunCache, progress: &Progress) -> Result<FigureOutput, PaperError> {
    let scale = &options.scale;
    let backends = [
        BackendKind::linux(DiscardMode::None),
        BackendKind::linux(DiscardMode::Pages),
        BackendKind::linux(DiscardMode::Fine8),
    ];
    let memory = scale.cgroup_memory_pages();
    let pages = scale.swap_pages * 40 / 100 + memory as u64;
    let swaps = if scale.quick { 2.0 } else { 3.0 };
    // About 60 samples at the ~150 MiB/s the block SSD sustains here.
    let expected_s = scale.swap_bytes(swaps) as f64 / (150u64 << 20) as f64;
    let sample_ns = ((expected_s / 60.0).max(0.05) * SECOND_NS as f64) as u64;
    let configs: Vec<RunConfig> = backends
        .iter()
        .map(|&backend| {
            let tenant = page_tenant("vm-scalability", Workload::AnonWRand, pages, memory, scale.threads);
            let mut config = base_config(
                scale,
                options.seed,
                "wrand-u40-fresh".into(),
                backend,
                vec![tenant],
                Phase::time(0),
                swap_out_phase(scale, swaps),
            );
            // A freshly formatted device, as in the paper: the ramp-up is the point.
            config.precondition = false;
            config.sample_ns = sample_ns;
            config
        })
        .collect();
    let results = run_all("2", &configs, options.jobs, cache, progress)?;
    let title = "Fig. 2: swap-out bandwidth over time, random writes at 40 % utilization";
    let mut chart = LineChart::new(title, "time (s)", "swap-out MiB/s");
    let mut table = Table::new(&["back end", "t (s)", "swap-out MiB/s", "WAF", "utilization %"]);
    for result in &results {
        let points: Vec<(f64, f64)> = result.series.iter().map(|s| (s.t_s, s.swap_out_mib_s)).collect();
        chart.series(&result.backend, &points);
        for sample in &result.series {
            table.row(vec![
                result.backend.clone(),
                f1(sample.t_s),
                f1(sample.swap_out_mib_s),
                f2(sample.waf),
                f1(sample.utilization * 100.0),
            ]);
        }
    }
    chart.series_right("WAF, no TRIM", &results[0].series.iter().map(|s| (s.t_s, s.waf)).collect::<Vec<_>>());
    chart.right_axis_label("WAF").y_from_zero(true);
    // The last third of the run: the steady state the paper's curves settle into.
    let tail = |result: &RunResult| {
        let n = result.series.len();
        let tail = &result.series[n - n / 3..];
        tail.iter().map(|s| s.swap_out_mib_s).sum::<f64>() / tail.len().max(1) as f64
    };
    let (none, pages512, fine8) = (tail(&results[0]), tail(&results[1]), tail(&results[2]));
    let comparisons = vec![
        Comparison::new(
            "512-slot TRIM vs none, steady state",
            "negligible effect",
            format!("{} vs {} MiB/s ({:+.0} %)", f1(pages512), f1(none), (ratio(pages512, none) - 1.0) * 100.0),
            (ratio(pages512, none) - 1.0).abs() < 0.25,
            "",
        ),
        Comparison::new(
            "8-slot TRIM vs none, steady state",
            "slight improvement, still ~2x below the 488 MiB/s maximum",
            format!("{} vs {} MiB/s", f1(fine8), f1(none)),
            fine8 >= none && fine8 < 0.75 * 488.0,
            "",
        ),
    ];
    let runs: Vec<serde_json::Value> = results.iter().map(|r| serde_json::to_value(r).expect("serializes")).collect();
    Ok(FigureOutput {
        id: "2".into(),
        title: title.into(),
        table,
        json: json!({ "figure": "2", "title": title, "scale": options.scale, "seed": options.seed, "runs": runs }),
        png: chart.render_png(900, 560)?,
        extra_png: Vec::new(),
        comparisons,
        notes: vec![
            "Fig. 2 starts from a freshly formatted device (no preconditioning), as its ramp-up is the point.".into()
        ],
    })
}
