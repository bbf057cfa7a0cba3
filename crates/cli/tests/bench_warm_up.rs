//! `znswap bench --warm-up-ops`: accesses run before the clock starts are left out of the
//! figures, and what they wrote still reads back.

use std::process::{Command, Output};

fn znswap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_znswap")).args(args).output().expect("running znswap")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn warm_up_accesses_are_left_out_of_the_figures() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warm.zns").to_string_lossy().into_owned();
    let out = znswap(&["device", "create", "--path", &path, "--zones", "16", "--zone-size", "4M"]);
    assert!(out.status.success(), "create failed: {}", text(&out.stderr));
    // 8192 pages in a budget of 2048: 200k random writes swap out most of 150k pages and
    // rewrite the device about ten times; the 1000 timed ones, at most about 1000.
    let out = znswap(&[
        "bench",
        "--device",
        &path,
        "--workload",
        "anon-w-rand",
        "--memory",
        "8M",
        "--wss",
        "32M",
        "--threads",
        "2",
        "--seconds",
        "60",
        "--ceiling-seconds",
        "0.2",
        "--warm-up-ops",
        "200000",
        "--ops",
        "1000",
        "--json",
    ]);
    assert!(out.status.success(), "bench failed ({}):\n{}", out.status, text(&out.stderr));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bench JSON");
    assert_eq!(result["warm_up_ops"], 200000, "{result}");
    assert_eq!(result["ops"], 1000, "{result}");
    let swapped_out = result["stats"]["swap_outs_written"].as_u64().unwrap();
    assert!(swapped_out < 5000, "the warm-up's swap-outs were counted: {swapped_out} pages for 1000 accesses");
    assert_eq!(result["corrupted"], 0, "{result}");
    // The final sweep reads every page back, those the warm-up wrote last included.
    assert!(result["pages_verified"].as_u64().unwrap() >= 8192, "{result}");
}
