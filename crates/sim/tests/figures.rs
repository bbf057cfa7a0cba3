//! A paper figure runs end to end at the tiny scale and writes its files.

use znswap_sim::paper::{self, PaperOptions, Progress, RunCache, Scale};

fn options() -> PaperOptions {
    PaperOptions { scale: Scale::tiny(), seed: 1, jobs: 2 }
}

#[test]
fn raw_swap_out_writes_csv_json_and_png() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = RunCache::default();
    let output = paper::run_figure("raw", &options(), &mut cache, &Progress::quiet()).unwrap();
    let files = output.write(dir.path()).unwrap();
    assert_eq!(files.len(), 3);
    let csv = std::fs::read_to_string(dir.path().join("raw.csv")).unwrap();
    assert!(csv.starts_with("cores,back end,swap-out MiB/s"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 2 * 2, "two core counts, two back ends");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("raw.json")).unwrap()).unwrap();
    assert_eq!(json["runs"].as_array().unwrap().len(), 4);
    let png = std::fs::read(dir.path().join("raw.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    // One core is CPU-bound at the calibrated 740 MiB/s; the swap systems match.
    let one_core = json["runs"][0]["swap_out_mib_s"].as_f64().unwrap();
    assert!((one_core - 740.0).abs() < 40.0, "one core: {one_core} MiB/s");
    assert!(output.comparisons.iter().any(|c| c.agrees));
}

#[test]
fn figure_6_shows_zns_flat() {
    let output = paper::run_figure("6", &options(), &mut RunCache::default(), &Progress::quiet()).unwrap();
    assert_eq!(output.table.rows.len(), 4, "two utilizations, two devices");
    let flat = output.comparisons.iter().find(|c| c.metric.starts_with("ZNS SSD")).unwrap();
    assert!(flat.agrees, "{flat:?}");
}

#[test]
fn unknown_figures_are_refused() {
    let error = paper::run_figure("5", &options(), &mut RunCache::default(), &Progress::quiet()).err().unwrap();
    assert!(matches!(&error, paper::PaperError::UnknownFigure { figure } if figure == "5"), "{error}");
}
