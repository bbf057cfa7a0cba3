//! `znswap dst --pager`: deterministic simulation of the live pager. Each seed picks a
//! scenario (fault mode, threads, regions, budget, device, faults) and interleaves the
//! pager core's actors over a model of the page tables and the device; every read is
//! checked against the last write. Several seeds end with their coverage (what the
//! seeds exercised, summed), checked against floors with `--floors`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use znswap_dst::coverage::{Coverage, Value};
use znswap_dst::pager::{run, PagerCoverage, PagerDstOptions, PagerDstReport, PagerFaultMode};
use znswap_dst::{Floors, Shortfall};

use crate::cmd_dst::{print_json, read_floors};
use crate::progress::Progress;
use crate::stats::Table;

pub struct PagerDstRequest {
    pub seed: u64,
    pub seeds: u64,
    pub steps: u64,
    pub json: bool,
    /// A floors file (`crates/dst/pager-coverage-floors.json`): the run fails when a
    /// coverage counter falls below its floor.
    pub floors: Option<PathBuf>,
}

/// Runs the seeds; returns whether all passed and every coverage floor held.
pub fn dst(request: &PagerDstRequest) -> Result<bool> {
    // Read and check the floors before the seeds run, not after.
    let floors = request.floors.as_deref().map(read_floors).transpose()?;
    if let Some(floors) = &floors {
        PagerCoverage::default().figures().shortfalls(floors).with_context(|| floors_context(request))?;
    }
    let (reports, seconds_per_seed) = run_seeds(request);
    let failed: Vec<u64> = reports.iter().filter(|report| !report.passed()).map(|report| report.seed).collect();
    let coverage = PagerCoverage::of(&reports);
    let figures = coverage.figures();
    let shortfalls = match &floors {
        Some(floors) => Some(figures.shortfalls(floors).with_context(|| floors_context(request))?),
        None => None,
    };
    if request.json {
        print_json(&reports, &seconds_per_seed, &coverage, shortfalls.as_deref())?;
    } else {
        print!("{}", seeds_table(&reports, &seconds_per_seed).render());
        for report in &reports {
            for violation in report.violations.iter().take(10) {
                println!("seed {}: {violation}", report.seed);
            }
        }
        print!("{}", coverage_table(&figures, floors.as_ref()).render());
        println!("dst --pager: {} passed, {} failed", request.seeds - failed.len() as u64, failed.len());
    }
    for seed in &failed {
        eprintln!(
            "dst --pager: seed {seed} FAILED; replay with `znswap dst --pager --seed {seed} --ops {}`",
            request.steps
        );
    }
    let shortfalls = shortfalls.unwrap_or_default();
    report_shortfalls(&shortfalls, request);
    Ok(failed.is_empty() && shortfalls.is_empty())
}

/// Each seed's report, and the seconds it took, in seed order. Seeds run on every CPU
/// at once (each seed is a deterministic simulation of its own, on one thread), so the
/// reports are the same however many run together.
fn run_seeds(request: &PagerDstRequest) -> (Vec<PagerDstReport>, Vec<f64>) {
    let progress = Progress::new(!request.json);
    let next = AtomicU64::new(request.seed);
    let end = request.seed + request.seeds;
    let done = AtomicU64::new(0);
    let results = Mutex::new(Vec::with_capacity(request.seeds as usize));
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(request.seeds.max(1) as usize);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Relaxed);
                if seed >= end {
                    break;
                }
                let started = Instant::now();
                let report = run(&PagerDstOptions::new(seed, request.steps));
                let seconds = started.elapsed().as_secs_f64();
                results.lock().expect("a seed's worker panicked").push((seed, report, seconds));
                let done = done.fetch_add(1, Relaxed) + 1;
                progress.set(format!("pager seeds: {done} of {} done (seed {seed} last)", request.seeds));
            });
        }
    });
    progress.clear();
    let mut results = results.into_inner().expect("a seed's worker panicked");
    results.sort_by_key(|&(seed, _, _)| seed);
    results.into_iter().map(|(_, report, seconds)| (report, seconds)).unzip()
}

/// A row per seed.
fn seeds_table(reports: &[PagerDstReport], seconds_per_seed: &[f64]) -> Table {
    let mut table = Table::new(&[
        "seed",
        "steps",
        "reads",
        "swap-ins",
        "lost",
        "corrupted",
        "gc runs",
        "mode",
        "seconds",
        "verdict",
    ]);
    for (report, seconds) in reports.iter().zip(seconds_per_seed) {
        table.row(vec![
            report.seed.to_string(),
            report.ops.to_string(),
            report.pages_verified.to_string(),
            report.swap_ins_verified.to_string(),
            report.lost.to_string(),
            report.corrupted.to_string(),
            report.gc_runs.to_string(),
            match report.scenario.fault_mode {
                PagerFaultMode::SelfPaging => "self-paging".to_string(),
                PagerFaultMode::HandlerThreads(count) => format!("{count} handlers"),
            },
            format!("{seconds:.2}"),
            if report.passed() { "ok".into() } else { "FAILED".into() },
        ]);
    }
    table
}

/// The coverage counters, described; with floors, each with its floor (if any) and its
/// name, which is what a floors file says.
fn coverage_table(figures: &Coverage, floors: Option<&Floors>) -> Table {
    let count = |value: Value| match value {
        Value::Count(count) => count.to_string(),
        Value::SeedShare { seeds, of } => format!("{seeds} of {of}"),
    };
    let Some(floors) = floors else {
        let mut table = Table::new(&["coverage", "value"]);
        for figure in &figures.figures {
            table.row(vec![figure.what.to_string(), count(figure.value)]);
        }
        return table;
    };
    let mut table = Table::new(&["coverage", "value", "floor", "", "counter"]);
    for figure in &figures.figures {
        let floor = floors.floors.iter().find(|(name, _)| name == figure.name).map(|&(_, floor)| floor);
        let below = floor.is_some_and(|floor| figure.value.number() < floor);
        table.row(vec![
            figure.what.to_string(),
            count(figure.value),
            floor.map(|floor| floor.to_string()).unwrap_or_default(),
            if below { "BELOW FLOOR".into() } else { String::new() },
            figure.name.to_string(),
        ]);
    }
    table
}

fn floors_context(request: &PagerDstRequest) -> String {
    let path = request.floors.as_deref().unwrap_or(Path::new("?"));
    format!("checking pager coverage floors from {}", path.display())
}

fn report_shortfalls(shortfalls: &[Shortfall], request: &PagerDstRequest) {
    for shortfall in shortfalls {
        eprintln!("dst --pager: coverage below floor: {shortfall}");
    }
    if !shortfalls.is_empty() {
        eprintln!(
            "dst --pager: the seeds reach less of the pager than the floors in {} say they did; if a scenario \
             change meant it, re-measure and lower the floor with the measurement beside it",
            request.floors.as_deref().unwrap_or(Path::new("?")).display()
        );
    }
}
