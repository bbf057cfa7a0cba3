//! `znswap dst`: deterministic simulation testing of the swap engine. Each seed picks a
//! scenario (policy, record encoding, geometry, workload, faults), runs it against a
//! fault-injecting model device and checks every swap-in against an oracle. Several
//! seeds end with their coverage (which engine paths and fault stages the seeds
//! reached), checked against floors with `--floors`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;
use znswap_dst::coverage::Value;
use znswap_dst::{run, Coverage, DstOptions, Floors, Shortfall};

use crate::progress::Progress;
use crate::stats::{Latency, Table};

pub struct DstRequest {
    pub seed: u64,
    pub seeds: u64,
    pub ops: u64,
    pub json: bool,
    /// A floors file (`crates/dst/coverage-floors.json`): the run fails when a coverage
    /// figure falls below its floor.
    pub floors: Option<PathBuf>,
}

/// One seed's report in a run's JSON, with its time.
#[derive(Serialize)]
struct SeedLine<'a, R> {
    #[serde(flatten)]
    report: &'a R,
    seconds: f64,
}

/// The JSON of a run (the engine's or the pager's), its seeds and their coverage.
#[derive(Serialize)]
struct RunJson<'a, R, C> {
    seeds: Vec<SeedLine<'a, R>>,
    coverage: &'a C,
    /// Figures below their floor (with `--floors`).
    #[serde(skip_serializing_if = "Option::is_none")]
    below_floors: Option<Vec<ShortfallJson>>,
}

#[derive(Serialize)]
struct ShortfallJson {
    name: &'static str,
    value: f64,
    floor: f64,
}

/// Runs the seeds; returns whether all passed and every coverage floor held.
pub fn dst(request: &DstRequest) -> Result<bool> {
    // Read and check the floors before hours of seeds, not after.
    let floors = request.floors.as_deref().map(read_floors).transpose()?;
    if let Some(floors) = &floors {
        Coverage::of(&[]).shortfalls(floors).with_context(|| floors_context(request))?;
    }
    let progress = Progress::new(!request.json);
    let mut table =
        Table::new(&["seed", "ops", "verified", "lost", "corrupted", "waf", "gc runs", "policy", "seconds", "verdict"]);
    let mut failed = Vec::new();
    let mut reports = Vec::new();
    let mut seconds_per_seed = Vec::new();
    for seed in request.seed..request.seed + request.seeds {
        progress.set(format!("seed {seed} ({} of {})", seed - request.seed + 1, request.seeds));
        let started = Instant::now();
        let report = run(&DstOptions::new(seed, request.ops));
        let seconds = started.elapsed().as_secs_f64();
        if !report.passed() {
            failed.push(seed);
        }
        table.row(vec![
            seed.to_string(),
            report.ops.to_string(),
            report.pages_verified.to_string(),
            report.lost.to_string(),
            report.corrupted.to_string(),
            format!("{:.3}", report.waf),
            report.gc_runs.to_string(),
            report.policy.to_string(),
            format!("{seconds:.1}"),
            if report.passed() { "ok".into() } else { "FAILED".into() },
        ]);
        reports.push(report);
        seconds_per_seed.push(seconds);
    }
    progress.clear();
    let coverage = Coverage::of(&reports);
    let shortfalls = match &floors {
        Some(floors) => Some(coverage.shortfalls(floors).with_context(|| floors_context(request))?),
        None => None,
    };
    if request.json {
        print_json(&reports, &seconds_per_seed, &coverage, shortfalls.as_deref())?;
    } else {
        print!("{}", table.render());
        for report in &reports {
            for violation in report.violations.iter().take(10) {
                println!("seed {}: {violation}", report.seed);
            }
        }
        if reports.len() > 1 {
            println!();
            print!("{}", coverage_table(&coverage, floors.as_ref(), &seconds_per_seed).render());
        }
        println!("dst: {} passed, {} failed", request.seeds - failed.len() as u64, failed.len());
    }
    for seed in &failed {
        eprintln!("dst: seed {seed} FAILED; reproduce with `znswap dst --seed {seed} --ops {}`", request.ops);
    }
    let shortfalls = shortfalls.unwrap_or_default();
    report_shortfalls(&shortfalls, request);
    Ok(failed.is_empty() && shortfalls.is_empty())
}

fn floors_context(request: &DstRequest) -> String {
    let path = request.floors.as_deref().unwrap_or(Path::new("?"));
    format!("checking coverage floors from {}", path.display())
}

pub fn read_floors(path: &Path) -> Result<Floors> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading coverage floors from {} (see crates/dst/coverage-floors.json, and for --pager \
             crates/dst/pager-coverage-floors.json)",
            path.display()
        )
    })?;
    Floors::parse(&text).with_context(|| format!("parsing coverage floors from {}", path.display()))
}

/// `{"seeds": [...], "coverage": {...}}` however many seeds, plus `"below_floors"` with
/// `--floors` (the engine's run and the pager's alike).
pub fn print_json<R: Serialize, C: Serialize>(
    reports: &[R],
    seconds_per_seed: &[f64],
    coverage: &C,
    shortfalls: Option<&[Shortfall]>,
) -> Result<()> {
    let seeds: Vec<SeedLine<R>> =
        reports.iter().zip(seconds_per_seed).map(|(report, &seconds)| SeedLine { report, seconds }).collect();
    let below_floors = shortfalls.map(|shortfalls| {
        shortfalls
            .iter()
            .map(|shortfall| ShortfallJson {
                name: shortfall.name,
                value: shortfall.value.number(),
                floor: shortfall.floor,
            })
            .collect()
    });
    println!("{}", serde_json::to_string_pretty(&RunJson { seeds, coverage, below_floors })?);
    Ok(())
}

/// The coverage figures, each with its floor (if any), then the time per seed. Names
/// first: they are what a floors file says.
pub fn coverage_table(coverage: &Coverage, floors: Option<&Floors>, seconds_per_seed: &[f64]) -> Table {
    let mut table = Table::new(&["coverage", "value", "floor", "", "of"]);
    for figure in &coverage.figures {
        let floor = floors.and_then(|floors| floors.floors.iter().find(|(name, _)| name == figure.name));
        let (value, floor_text) = match figure.value {
            Value::SeedShare { .. } => (
                format!("{:.0} %", 100.0 * figure.value.number()),
                floor.map(|(_, floor)| format!("{:.0} %", 100.0 * floor)),
            ),
            Value::Count(count) => (count.to_string(), floor.map(|(_, floor)| floor.to_string())),
        };
        let of = match figure.value {
            Value::SeedShare { seeds, of } => format!("{seeds} of {of}"),
            Value::Count(_) => String::new(),
        };
        let below = floor.is_some_and(|(_, floor)| figure.value.number() < *floor);
        table.row(vec![
            figure.name.to_string(),
            value,
            floor_text.unwrap_or_default(),
            if below { "BELOW FLOOR".into() } else { String::new() },
            of,
        ]);
    }
    let nanoseconds: Vec<u64> = seconds_per_seed.iter().map(|&seconds| (seconds * 1e9) as u64).collect();
    let spread = Latency::from_ns(&nanoseconds);
    if spread.count > 0 {
        let seconds = |us: f64| us / 1e6;
        table.row(vec![
            "seconds_per_seed (min/median/max)".into(),
            format!("{:.2}/{:.2}/{:.2}", seconds(spread.min_us), seconds(spread.p50_us), seconds(spread.max_us)),
            String::new(),
            String::new(),
            String::new(),
        ]);
    }
    table
}

fn report_shortfalls(shortfalls: &[Shortfall], request: &DstRequest) {
    for shortfall in shortfalls {
        eprintln!("dst: coverage below floor: {shortfall}");
    }
    if !shortfalls.is_empty() {
        eprintln!(
            "dst: the seeds reach less of the engine than the floors in {} say they did; if a scenario change \
             meant it, re-measure and lower the floor with the measurement beside it",
            request.floors.as_deref().unwrap_or(Path::new("?")).display()
        );
    }
}
