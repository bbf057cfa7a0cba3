//! `znswap sim`: the simulator. `paper` reproduces the paper's figures on the virtual
//! host (CSV, JSON, PNG per figure; `--all` adds report.md); `waf` prints the WAF of a
//! uniform random overwrite on either device model.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use znswap_sim::device_runs::{waf_block, waf_zns};
use znswap_sim::paper::{self, PaperOptions, Progress, RunCache, Scale};

#[derive(Subcommand)]
pub enum SimCommand {
    /// Reproduce a figure of the paper (or all of them, with a report) in simulation.
    Paper(PaperArgs),
    /// Write amplification of uniform random overwrites at a true utilization.
    Waf(WafArgs),
}

#[derive(Args)]
pub struct PaperArgs {
    /// The figure: 1, 2, 3, 4, 6, 10, 11, hotcold (§6.1.2), raw (§6.1.4), kv (Fig. 12 and 13).
    #[arg(long, required_unless_present = "all", conflicts_with = "all")]
    figure: Option<String>,
    /// Every figure, and DIR/report.md with the paper-vs-simulated table; the noisy
    /// figures (11, hotcold, kv) run again with the next seed for the table's seed column.
    #[arg(long)]
    all: bool,
    /// Directory for F.csv, F.json, F.png (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Small capacity and short runs (CI): 1 GiB of swap instead of 16 GiB, fewer points.
    #[arg(long)]
    quick: bool,
    /// Seed of every run (a run is a pure function of its configuration and seed).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs simulated in parallel [default: the number of CPUs].
    #[arg(long)]
    jobs: Option<usize>,
    /// Print the figures' JSON (an array, one element per figure) instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct WafArgs {
    /// block (the conventional SSD's FTL) or zns (the znswap engine's ZNGC on the ZNS SSD).
    #[arg(long)]
    model: String,
    /// True utilization: live pages / all pages (block) or all zone slots (zns), in (0, 1).
    #[arg(long)]
    util: f64,
    /// Pages per superblock (block) or per zone (zns; a multiple of 256).
    #[arg(long, default_value_t = 1024)]
    pages_per_block: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON (fields `waf` and `device_waf`).
    #[arg(long)]
    json: bool,
}

/// Runs the command; false when a run reported corrupted data or violations.
pub fn run(command: SimCommand) -> Result<bool> {
    match command {
        SimCommand::Paper(args) => paper(args),
        SimCommand::Waf(args) => waf(args),
    }
}

fn paper(args: PaperArgs) -> Result<bool> {
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())).max(1);
    let scale = if args.quick { Scale::quick() } else { Scale::full() };
    let options = PaperOptions { scale, seed: args.seed, jobs };
    let line = std::sync::Arc::new(crate::progress::Progress::new(!args.json));
    let progress = {
        let line = line.clone();
        Progress::new(move |message| line.set(message.to_string()))
    };
    let figures = if args.all {
        let outputs = paper::run_all(&options, &args.out, &progress)?;
        line.clear();
        outputs
    } else {
        let figure = args.figure.expect("clap requires --figure without --all");
        let mut cache = RunCache::default();
        let output = paper::run_figure(&figure, &options, &mut cache, &progress)?;
        line.clear();
        output.write(&args.out)?;
        vec![output]
    };
    let mut clean = true;
    for figure in &figures {
        let problems = problems(&figure.json);
        if !problems.is_empty() {
            clean = false;
            for problem in problems.iter().take(10) {
                eprintln!("error: figure {}: {problem}", figure.id);
            }
        }
    }
    if args.json {
        // An array however many figures.
        let all: Vec<&serde_json::Value> = figures.iter().map(|figure| &figure.json).collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        for figure in &figures {
            println!("{}\n", figure.title);
            print!("{}", figure.table.render());
            println!();
            for comparison in &figure.comparisons {
                let differs = |agrees: bool| if agrees { "" } else { " (differs)" };
                let other = match &comparison.other_seed {
                    Some(other) => format!("; seed {}: {}{}", other.seed, other.simulated, differs(other.agrees)),
                    None => String::new(),
                };
                println!(
                    "  {:<58} paper: {:<34} simulated: {}{}{other}",
                    comparison.metric,
                    comparison.paper,
                    comparison.simulated,
                    differs(comparison.agrees)
                );
            }
            println!();
        }
        println!("wrote {} figure(s) to {}", figures.len(), args.out.display());
    }
    Ok(clean)
}

/// Corrupted pages or violations reported by any run of a figure.
fn problems(json: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(runs) = json.get("runs").and_then(|runs| runs.as_array()) else { return out };
    for run in runs {
        let name = run.get("name").and_then(|name| name.as_str()).unwrap_or("?");
        let corrupted = run.get("corrupted").and_then(|value| value.as_u64()).unwrap_or(0);
        if corrupted > 0 {
            out.push(format!("run {name}: {corrupted} pages swapped in with the wrong data"));
        }
        for violation in run.get("violations").and_then(|v| v.as_array()).into_iter().flatten() {
            out.push(format!("run {name}: {}", violation.as_str().unwrap_or("?")));
        }
    }
    out
}

fn waf(args: WafArgs) -> Result<bool> {
    if !(args.util > 0.0 && args.util < 1.0) {
        bail!("--util {} must be strictly between 0 and 1 (a fraction, not a percentage)", args.util);
    }
    let answer = match args.model.as_str() {
        "block" => waf_block(args.util, args.pages_per_block, args.seed),
        "zns" => waf_zns(args.util, args.pages_per_block, args.seed),
        other => bail!("unknown --model {other:?}: use block or zns"),
    }
    .context("the WAF run failed")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        println!(
            "{} model, utilization {:.3}: WAF {:.3} (device WAF {:.3}) over {} host pages",
            answer.model, answer.utilization, answer.waf, answer.device_waf, answer.host_pages
        );
    }
    Ok(true)
}
