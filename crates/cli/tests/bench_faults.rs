//! `znswap bench --inject-faults`: the pager runs over a device that fails on purpose;
//! the run reports what was injected and what the pager saw, and succeeds as long as no
//! page reads back wrong (pages lost with an offline zone are expected and counted).

use std::process::{Command, Output};

fn znswap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_znswap")).args(args).output().expect("running znswap")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn small_device(dir: &std::path::Path) -> String {
    let path = dir.join("faulty.zns").to_string_lossy().into_owned();
    let out = znswap(&["device", "create", "--path", &path, "--zones", "16", "--zone-size", "4M"]);
    assert!(out.status.success(), "create failed: {}", text(&out.stderr));
    path
}

/// A short bench on `path` with `spec` injected (and `extra` flags); its JSON.
fn bench_with_faults(path: &str, spec: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "bench",
        "--device",
        path,
        "--memory",
        "8M",
        "--wss",
        "32M",
        "--threads",
        "2",
        "--seconds",
        "1",
        "--ceiling-seconds",
        "0.2",
        "--inject-faults",
        spec,
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = znswap(&args);
    assert!(
        out.status.success(),
        "bench --inject-faults {spec} {extra:?} failed ({}):\n{}",
        out.status,
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("bench JSON")
}

#[test]
fn a_bad_fault_spec_names_the_key_and_the_grammar() {
    let dir = tempfile::tempdir().unwrap();
    let path = small_device(dir.path());
    for (spec, named) in [("raed=0.1", "\"raed\""), ("read=2", "\"2\""), ("offline", "\"offline\"")] {
        let out = znswap(&["bench", "--device", &path, "--inject-faults", spec]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {stderr}");
        assert!(stderr.contains(named) && stderr.contains("KEY=VALUE"), "{spec}: {stderr}");
    }
}

#[test]
fn failed_commands_and_slow_completions_are_counted_in_both_fault_modes() {
    let dir = tempfile::tempdir().unwrap();
    let path = small_device(dir.path());
    for mode in [&[][..], &["--handler-threads", "2"][..]] {
        let result = bench_with_faults(&path, "read=0.02,append=0.02,slow=0.01,slow-us=200", mode);
        assert_eq!(result["corrupted"], 0, "{mode:?}: {result}");
        assert_eq!(result["lost_pages"], 0, "{mode:?}: {result}");
        assert!(result["device_errors"].as_u64().unwrap() > 0, "{mode:?}: {result}");
        let injected = &result["injected"];
        assert!(injected["read_errors"].as_u64().unwrap() > 0, "{mode:?}: {result}");
        assert!(injected["slow_completions"].as_u64().unwrap() > 0, "{mode:?}: {result}");
        assert!(result["inject_faults"].as_str().unwrap().starts_with("read=0.02,"), "{result}");
        assert!(result["pages_verified"].as_u64().unwrap() >= 8192, "{mode:?}: {result}");
    }
}

/// Two zones with data go offline: their pages are lost, the bench's SIGBUS handler
/// counts each as it is touched, and the run still succeeds with nothing corrupted.
fn offline_zones(mode: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let path = small_device(dir.path());
    // Seed 1 takes the zones offline at commands 1282 and 1954. With a mean of 2000 the
    // second came at 7102, more than a 1 s run issues on a loaded machine (CI: 5366).
    let result = bench_with_faults(&path, "offline=2,offline-after=1000", mode);
    assert_eq!(result["corrupted"], 0, "{mode:?}: {result}");
    assert_eq!(result["injected"]["zones_offline"], 2, "{mode:?}: {result}");
    let observed = result["lost_pages_observed"].as_u64().unwrap();
    assert!(observed > 0, "{mode:?}: two zones with data went offline and nothing was lost: {result}");
    assert_eq!(result["lost_pages"], observed, "{mode:?}: the pager's count against the pages found lost: {result}");
}

#[test]
fn offline_zones_lose_pages_and_the_bench_goes_on_when_self_paging() {
    offline_zones(&[]);
}

#[test]
fn offline_zones_lose_pages_and_the_bench_goes_on_with_handler_threads() {
    offline_zones(&["--handler-threads", "2"]);
}
