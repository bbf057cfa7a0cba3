//! What the userfaultfd probes print: figures (µs per page) and rules (what the kernel
//! answered), as tables or as JSON.

use std::time::Duration;

#[derive(serde::Serialize)]
pub struct Figure {
    pub name: String,
    /// Microseconds per page (or per fault, for round trips).
    pub us_per_page: f64,
    pub samples: u64,
    pub what: &'static str,
}

#[derive(serde::Serialize)]
pub struct Rule {
    pub name: &'static str,
    pub outcome: String,
}

/// The probes' arguments: `--pages N` (else `default_pages`) and `--json`.
pub fn args(default_pages: u64) -> (u64, bool) {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let pages = args
        .iter()
        .position(|a| a == "--pages")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse().expect("--pages N"))
        .unwrap_or(default_pages);
    (pages, json)
}

pub fn us_per(elapsed: Duration, count: u64) -> f64 {
    elapsed.as_secs_f64() * 1e6 / count.max(1) as f64
}

/// Prints the figures and the rules (headed `rules_title`), as JSON with `json`.
pub fn print(figures: &[Figure], rules_title: &str, rules: &[Rule], json: bool) {
    if json {
        println!("{}", serde_json::json!({ "figures": figures, "rules": rules }));
        return;
    }
    let mut table = znswap_chart::Table::new(&["measure", "µs per page", "pages", "what"]);
    for figure in figures {
        table.row(vec![
            figure.name.clone(),
            format!("{:.3}", figure.us_per_page),
            figure.samples.to_string(),
            figure.what.into(),
        ]);
    }
    print!("{}", table.render());
    println!();
    let mut table = znswap_chart::Table::new(&[rules_title, "outcome"]);
    for rule in rules {
        table.row(vec![rule.name.into(), rule.outcome.clone()]);
    }
    print!("{}", table.render());
}
