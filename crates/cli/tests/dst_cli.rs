//! `znswap dst` as CI runs it: several seeds, their coverage, and floors.

use std::process::{Command, Output};

fn znswap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_znswap")).args(args).output().expect("running znswap")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn several_seeds_end_with_a_coverage_table_and_json_object() {
    let out = znswap(&["dst", "--seed", "1", "--seeds", "2", "--ops", "3000"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("seeds_with_gc_share") && stdout.contains("pages_verified_min"), "{stdout}");

    let out = znswap(&["dst", "--seed", "1", "--seeds", "2", "--ops", "3000", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["seeds"].as_array().map(Vec::len), Some(2));
    assert_eq!(json["coverage"]["seeds"], 2);
    assert!(json.get("below_floors").is_none());
}

#[test]
fn a_figure_below_its_floor_fails_the_run_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let floors = dir.path().join("floors.json");
    std::fs::write(
        &floors,
        r#"{"floors": {"pages_verified_min": {"floor": 1e12}, "seeds_with_owner_reused_share": {"floor": 0}}}"#,
    )
    .unwrap();
    let floors = floors.to_string_lossy().into_owned();
    let out = znswap(&["dst", "--seed", "1", "--seeds", "2", "--ops", "3000", "--floors", &floors, "--json"]);
    assert!(!out.status.success(), "a floor of 1e12 swap-ins must fail the run");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("pages_verified_min") && !stderr.contains("seeds_with_owner_reused_share"), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let below = json["below_floors"].as_array().expect("below_floors");
    assert_eq!(below.len(), 1);
    assert_eq!(below[0]["name"], "pages_verified_min");
}

#[test]
fn a_misspelt_floor_fails_before_any_seed_runs() {
    let dir = tempfile::tempdir().unwrap();
    let floors = dir.path().join("floors.json");
    std::fs::write(&floors, r#"{"floors": {"seeds_with_gc": {"floor": 0.9}}}"#).unwrap();
    let floors = floors.to_string_lossy().into_owned();
    let out = znswap(&["dst", "--seeds", "2", "--ops", "1000000000", "--floors", &floors]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("unknown coverage figure `seeds_with_gc`"), "{stderr}");
}
