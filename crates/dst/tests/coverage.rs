//! The coverage figures and the floors check CI relies on, the engine DST's and the
//! pager DST's.

use znswap_dst::coverage::Value;
use znswap_dst::pager::{PagerCoverage, PagerDstOptions, PagerDstReport};
use znswap_dst::{run, Coverage, DstOptions, DstReport, Floors, FloorsError};

/// Two short seeds: real reports, whose fields the tests then set.
fn reports() -> Vec<DstReport> {
    (1..=2).map(|seed| run(&DstOptions::new(seed, 2_000))).collect()
}

fn floors(entries: &[(&str, f64)]) -> Floors {
    Floors { floors: entries.iter().map(|&(name, floor)| (name.to_string(), floor)).collect() }
}

#[test]
fn floors_check_fails_when_a_figure_is_below_its_floor() {
    let mut reports = reports();
    reports[0].stats.gc_runs = 5;
    reports[1].stats.gc_runs = 0;
    reports[0].pages_verified = 30_000;
    reports[1].pages_verified = 19_999;
    let coverage = Coverage::of(&reports);
    assert_eq!(coverage.get("seeds_with_gc_share").unwrap().value, Value::SeedShare { seeds: 1, of: 2 });
    assert_eq!(coverage.get("pages_verified_min").unwrap().value, Value::Count(19_999));

    let met = floors(&[("seeds_with_gc_share", 0.5), ("pages_verified_min", 19_999.0)]);
    assert_eq!(coverage.shortfalls(&met).unwrap(), vec![]);

    let missed = floors(&[("seeds_with_gc_share", 0.9), ("pages_verified_min", 20_000.0), ("seeds", 2.0)]);
    let shortfalls = coverage.shortfalls(&missed).unwrap();
    let names: Vec<&str> = shortfalls.iter().map(|shortfall| shortfall.name).collect();
    assert_eq!(names, ["seeds_with_gc_share", "pages_verified_min"]);
    let message = shortfalls[0].to_string();
    assert!(message.contains("seeds_with_gc_share") && message.contains("1 of 2"), "{message}");
}

#[test]
fn floors_naming_no_figure_are_an_error() {
    let coverage = Coverage::of(&reports());
    let error = coverage.shortfalls(&floors(&[("seeds_with_gc_shares", 0.5)])).unwrap_err();
    assert!(matches!(error, FloorsError::UnknownFigure { ref name, .. } if name == "seeds_with_gc_shares"));
    assert!(matches!(Floors::parse(r#"{"floors": {"seeds": 3}}"#), Err(FloorsError::Shape(_))));
    assert!(matches!(Floors::parse("{"), Err(FloorsError::Json(_))));
}

/// The file CI passes to `znswap dst --floors` parses, names only known figures, and
/// its share floors are shares.
#[test]
fn committed_floors_name_known_figures() {
    let text = include_str!("../coverage-floors.json");
    let floors = Floors::parse(text).expect("coverage-floors.json parses");
    assert!(floors.floors.len() >= 10, "{} floors", floors.floors.len());
    let empty = Coverage::of(&[]);
    empty.shortfalls(&floors).expect("every floor names a figure");
    for (name, floor) in &floors.floors {
        if name.ends_with("_share") {
            assert!((0.0..=1.0).contains(floor), "{name}: {floor} is not a share");
        }
    }
}

#[test]
fn coverage_serializes_as_one_object_of_figures() {
    let coverage = Coverage::of(&reports());
    let json = serde_json::to_value(&coverage).unwrap();
    assert_eq!(json["seeds"], 2);
    let share = json["seeds_with_owner_reused_share"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&share));
    assert_eq!(json.as_object().unwrap().len(), coverage.figures.len());
}

/// Two short pager seeds: real reports, whose counters the tests then set.
fn pager_reports() -> Vec<PagerDstReport> {
    (1..=2).map(|seed| znswap_dst::pager::run(&PagerDstOptions::new(seed, 3_000))).collect()
}

#[test]
fn pager_floors_check_fails_when_a_counter_is_below_its_floor() {
    let mut reports = pager_reports();
    reports[0].coverage.served_children = 3;
    reports[1].coverage.served_children = 1;
    let figures = PagerCoverage::of(&reports).figures();
    assert_eq!(figures.get("served_children").unwrap().value, Value::Count(4));

    let met = floors(&[("served_children", 4.0)]);
    assert_eq!(figures.shortfalls(&met).unwrap(), vec![]);

    let missed = floors(&[("served_children", 5.0), ("forks", 0.0)]);
    let shortfalls = figures.shortfalls(&missed).unwrap();
    let names: Vec<&str> = shortfalls.iter().map(|shortfall| shortfall.name).collect();
    assert_eq!(names, ["served_children"]);
    let message = shortfalls[0].to_string();
    assert!(
        message.contains("served_children (forks whose child the pager served too) is 4, below its floor 5"),
        "{message}"
    );

    let error = figures.shortfalls(&floors(&[("served_child", 1.0)])).unwrap_err();
    assert!(matches!(error, FloorsError::UnknownFigure { ref name, .. } if name == "served_child"));
}

/// Each figure is the JSON counter of its name (all but the seeds run), so a floors file
/// names what the JSON shows.
#[test]
fn pager_figures_are_its_json_counters() {
    let coverage = PagerCoverage::of(&pager_reports());
    let json = serde_json::to_value(&coverage).unwrap();
    let figures = coverage.figures();
    assert_eq!(json["seeds"], 2);
    // Beside the figures: the seeds run, and the seeds' other counters summed.
    let counters = serde_json::to_value(znswap_dst::pager::Coverage::default()).unwrap();
    for key in json.as_object().unwrap().keys() {
        let known =
            key == "seeds" || figures.figures.iter().any(|figure| figure.name == key) || counters.get(key).is_some();
        assert!(known, "{key} is in the JSON but is neither a figure nor a seed's counter");
    }
    for figure in &figures.figures {
        let Value::Count(count) = figure.value else { panic!("{} is a count", figure.name) };
        assert_eq!(json[figure.name], count, "{}", figure.name);
    }
}

/// The file CI passes to `znswap dst --pager --floors` parses and names only known
/// counters, each floor above zero (a floor of 0 checks nothing).
#[test]
fn committed_pager_floors_name_known_counters() {
    let floors =
        Floors::parse(include_str!("../pager-coverage-floors.json")).expect("pager-coverage-floors.json parses");
    assert!(floors.floors.len() >= 30, "{} floors", floors.floors.len());
    PagerCoverage::default().figures().shortfalls(&floors).expect("every floor names a counter");
    for (name, floor) in &floors.floors {
        assert!(*floor > 0.0, "{name}: {floor}");
    }
}
