//! The paper's experiments (`znswap sim paper`): each figure is a set of runs, a table,
//! a chart, and the comparison of its headline numbers with the paper's.

pub mod exec;
mod fig_cache;
mod fig_device;
mod fig_hotcold;
mod fig_kv;
mod fig_raw;
mod fig_tenants;
mod fig_waf;
pub mod output;
pub mod report;
pub mod scale;

use std::path::{Path, PathBuf};

use znswap_chart::ChartError;
use znswap_workload::KvConfigError;

use crate::device_runs::SequentialError;
use crate::run::RunError;

pub use exec::{Progress, RunCache};
pub use fig_hotcold::skewed_pmbench_config;
pub use output::{Comparison, FigureOutput, SeedResult, Table};
pub use scale::Scale;

/// The figures `znswap sim paper --figure` knows, in report order.
pub const FIGURES: [&str; 10] = ["1", "2", "3", "4", "6", "10", "11", "hotcold", "raw", "kv"];

/// Figures whose headline numbers are ratios near 1 or tail latencies, which move with
/// the seed: `run_all` runs them again with the next seed and the report shows both.
pub const NOISY_FIGURES: [&str; 3] = ["11", "hotcold", "kv"];

/// Why a figure could not be made or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PaperError {
    #[error("unknown figure {figure:?}: use one of {figures}", figures = FIGURES.join(", "))]
    UnknownFigure { figure: String },
    #[error("run {run}")]
    Run {
        run: String,
        #[source]
        source: RunError,
    },
    #[error(transparent)]
    Device(#[from] SequentialError),
    #[error("the memcached-ETC workload")]
    Workload(#[from] KvConfigError),
    #[error("chart")]
    Chart(#[from] ChartError),
    #[error("json")]
    Json(#[from] serde_json::Error),
    #[error("cannot create {}", path.display())]
    CreateDirectory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How to run the experiments.
pub struct PaperOptions {
    pub scale: Scale,
    pub seed: u64,
    /// Runs in parallel (each run is single-threaded and deterministic).
    pub jobs: usize,
}

/// Runs one figure. Runs shared between figures (Fig. 1 is part of Fig. 10) are taken
/// from `cache` when already done.
pub fn run_figure(
    figure: &str,
    options: &PaperOptions,
    cache: &mut RunCache,
    progress: &Progress,
) -> Result<FigureOutput, PaperError> {
    match figure {
        "1" => fig_waf::figure_1(options, cache, progress),
        "2" => fig_waf::figure_2(options, cache, progress),
        "3" => fig_cache::figure_3(options, cache, progress),
        "4" => fig_cache::figure_4(options, cache, progress),
        "6" => fig_device::figure_6(options, progress),
        "10" => fig_waf::figure_10(options, cache, progress),
        "11" => fig_tenants::figure_11(options, cache, progress),
        "hotcold" => fig_hotcold::figure_hotcold(options, cache, progress),
        "raw" => fig_raw::figure_raw(options, cache, progress),
        "kv" => fig_kv::figure_kv(options, cache, progress),
        other => Err(PaperError::UnknownFigure { figure: other.to_string() }),
    }
}

/// Runs every figure, writes each one's files and `report.md` into `dir`; the noisy
/// figures' comparisons also get the next seed's values.
pub fn run_all(options: &PaperOptions, dir: &Path, progress: &Progress) -> Result<Vec<FigureOutput>, PaperError> {
    let mut cache = RunCache::default();
    let mut outputs = Vec::new();
    // Fig. 10 first: Fig. 1 is a subset of its runs.
    let order = ["10", "1", "2", "3", "4", "6", "11", "hotcold", "raw", "kv"];
    for figure in order {
        let output = run_figure(figure, options, &mut cache, progress)?;
        output.write(dir)?;
        outputs.push(output);
    }
    // The noisy figures once more with the next seed (run names carry the seed, so the
    // cache cannot hand back a first-seed run).
    let other = PaperOptions { scale: options.scale, seed: options.seed.wrapping_add(1), jobs: options.jobs };
    for output in outputs.iter_mut().filter(|output| NOISY_FIGURES.contains(&output.id.as_str())) {
        let again = run_figure(&output.id, &other, &mut cache, progress)?;
        assert_eq!(again.comparisons.len(), output.comparisons.len(), "figure {}: the same comparisons", output.id);
        for (comparison, twin) in output.comparisons.iter_mut().zip(again.comparisons) {
            comparison.other_seed =
                Some(SeedResult { seed: other.seed, simulated: twin.simulated, agrees: twin.agrees });
        }
    }
    outputs.sort_by_key(|output| FIGURES.iter().position(|&id| id == output.id).unwrap_or(usize::MAX));
    let markdown = report::markdown(options, &outputs);
    let path = dir.join("report.md");
    std::fs::write(&path, markdown).map_err(|source| PaperError::Write { path: path.clone(), source })?;
    Ok(outputs)
}
