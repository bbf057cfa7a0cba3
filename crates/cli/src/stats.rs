//! Latency summaries and plain-text tables.

use serde::Serialize;

/// Percentiles of a set of latencies, in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
}

impl Latency {
    /// Summarises `samples_ns` (sorted in place).
    pub fn from_ns(samples_ns: &mut [u64]) -> Latency {
        if samples_ns.is_empty() {
            return Latency::default();
        }
        samples_ns.sort_unstable();
        let at = |q: f64| samples_ns[((samples_ns.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
        let sum: u128 = samples_ns.iter().map(|&s| s as u128).sum();
        Latency {
            count: samples_ns.len() as u64,
            p50_us: at(0.50),
            p99_us: at(0.99),
            max_us: *samples_ns.last().unwrap() as f64 / 1e3,
            mean_us: sum as f64 / samples_ns.len() as f64 / 1e3,
        }
    }
}

/// A table printed with columns padded to their widest cell; the first column is left
/// aligned, the rest right aligned.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { rows: vec![header.iter().map(|h| h.to_string()).collect()] }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.rows[0].len());
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let columns = self.rows[0].len();
        let widths: Vec<usize> =
            (0..columns).map(|c| self.rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        let mut out = String::new();
        for row in &self.rows {
            let cells: Vec<String> =
                row.iter()
                    .enumerate()
                    .map(|(c, cell)| {
                        if c == 0 {
                            format!("{cell:<w$}", w = widths[c])
                        } else {
                            format!("{cell:>w$}", w = widths[c])
                        }
                    })
                    .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_right_samples() {
        let mut samples: Vec<u64> = (1..=100).rev().map(|i| i * 1000).collect();
        let latency = Latency::from_ns(&mut samples);
        assert_eq!(latency.count, 100);
        assert_eq!(latency.p50_us, 51.0);
        assert_eq!(latency.p99_us, 99.0);
        assert_eq!(latency.max_us, 100.0);
        assert_eq!(latency.mean_us, 50.5);
        assert_eq!(Latency::from_ns(&mut []).count, 0);
    }

    #[test]
    fn tables_align() {
        let mut table = Table::new(&["what", "n"]);
        table.row(vec!["a".into(), "1000".into()]);
        assert_eq!(table.render(), "what     n\na     1000\n");
    }
}
