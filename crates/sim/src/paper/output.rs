//! What a figure produces: a table (printed, CSV), JSON, a PNG chart, and the
//! paper-vs-simulated comparisons for the report.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::PaperError;

pub use znswap_chart::Table;

/// One claim of the paper next to what the simulation gave.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub metric: String,
    pub paper: String,
    pub simulated: String,
    /// Whether the simulated value shows the paper's effect (direction and rough size).
    pub agrees: bool,
    pub note: String,
    /// The same comparison from a run with another seed (the noisy figures in `--all`).
    pub other_seed: Option<SeedResult>,
}

/// A comparison's simulated value under another seed.
#[derive(Clone, Debug, Serialize)]
pub struct SeedResult {
    pub seed: u64,
    pub simulated: String,
    pub agrees: bool,
}

impl Comparison {
    pub fn new(metric: &str, paper: &str, simulated: String, agrees: bool, note: &str) -> Comparison {
        Comparison {
            metric: metric.into(),
            paper: paper.into(),
            simulated,
            agrees,
            note: note.into(),
            other_seed: None,
        }
    }
}

/// A figure's whole output.
pub struct FigureOutput {
    pub id: String,
    pub title: String,
    pub table: Table,
    pub json: serde_json::Value,
    pub png: Vec<u8>,
    /// More charts: (file name, PNG).
    pub extra_png: Vec<(String, Vec<u8>)>,
    pub comparisons: Vec<Comparison>,
    /// What was scaled or changed, for the report.
    pub notes: Vec<String>,
}

impl FigureOutput {
    /// Writes `<id>.csv`, `<id>.json` and `<id>.png` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, PaperError> {
        std::fs::create_dir_all(dir).map_err(|source| PaperError::CreateDirectory { path: dir.into(), source })?;
        let mut files = vec![
            (format!("{}.csv", self.id), self.table.csv().into_bytes()),
            (format!("{}.json", self.id), serde_json::to_vec_pretty(&self.json)?),
            (format!("{}.png", self.id), self.png.clone()),
        ];
        files.extend(self.extra_png.iter().cloned());
        let mut written = Vec::new();
        for (name, bytes) in files {
            let path = dir.join(name);
            std::fs::write(&path, bytes).map_err(|source| PaperError::Write { path: path.clone(), source })?;
            written.push(path);
        }
        Ok(written)
    }
}

pub fn f1(value: f64) -> String {
    format!("{value:.1}")
}

pub fn f2(value: f64) -> String {
    format!("{value:.2}")
}

pub fn f0(value: f64) -> String {
    format!("{value:.0}")
}

/// `a / b`, guarded against a zero denominator.
pub fn ratio(a: f64, b: f64) -> f64 {
    if b.abs() < 1e-12 {
        f64::INFINITY
    } else {
        a / b
    }
}
