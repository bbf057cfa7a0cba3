//! A plain text table: the one every command and figure prints, for a terminal, as
//! CSV or as Markdown.

use serde::Serialize;

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

    /// Aligned columns for a terminal: the first (the rows' names) to the left, the
    /// others (figures) to the right.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|cell| cell.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .enumerate()
                .map(
                    |(column, (cell, &width))| {
                        if column == 0 {
                            format!("{cell:<width$}")
                        } else {
                            format!("{cell:>width$}")
                        }
                    },
                )
                .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_render_as_text_csv_and_markdown() {
        let mut table = Table::new(&["name", "value"]);
        table.row(vec!["a,b".into(), "1".into()]);
        table.row(vec!["long name".into(), "22".into()]);
        assert_eq!(table.csv(), "name,value\n\"a,b\",1\nlong name,22\n");
        assert_eq!(table.render(), "name       value\na,b            1\nlong name     22\n");
        assert!(table.markdown().contains("| long name | 22 |"));
    }
}
