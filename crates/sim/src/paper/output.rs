//! What a figure produces: a table (printed, CSV), JSON, a PNG chart, and the
//! paper-vs-simulated comparisons for the report.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::PaperError;

/// A plain table: a header and rows of cells.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|cell| cell.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.header.len(), "a row has one cell per column");
        self.rows.push(cells);
    }

    /// Aligned columns for a terminal.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|cell| cell.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> =
                cells.iter().zip(&widths).map(|(cell, &width)| format!("{cell:>width$}")).collect();
            padded.join("  ").trim_end().to_string() + "\n"
        };
        let mut out = line(&self.header);
        for row in &self.rows {
            out += &line(row);
        }
        out
    }

    /// RFC 4180 CSV.
    pub fn csv(&self) -> String {
        let quote = |cell: &String| {
            if cell.contains([',', '"', '\n']) {
                format!("\"{}\"", cell.replace('"', "\"\""))
            } else {
                cell.clone()
            }
        };
        let mut out = String::new();
        for cells in std::iter::once(&self.header).chain(&self.rows) {
            out += &cells.iter().map(quote).collect::<Vec<_>>().join(",");
            out.push('\n');
        }
        out
    }

    /// A Markdown table.
    pub fn markdown(&self) -> String {
        let mut out = format!("| {} |\n", self.header.join(" | "));
        out += &format!("|{}\n", "---|".repeat(self.header.len()));
        for row in &self.rows {
            out += &format!("| {} |\n", row.join(" | "));
        }
        out
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_render_as_text_csv_and_markdown() {
        let mut table = Table::new(&["name", "value"]);
        table.row(vec!["a,b".into(), "1".into()]);
        table.row(vec!["long name".into(), "22".into()]);
        assert_eq!(table.csv(), "name,value\n\"a,b\",1\nlong name,22\n");
        let text = table.render();
        assert!(text.starts_with("     name  value\n"), "{text}");
        assert!(table.markdown().contains("| long name | 22 |"));
    }
}
