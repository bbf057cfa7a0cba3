//! `znswap bench` killed with SIGKILL in the middle of a run, then run again on the same
//! device file: the file keeps each zone's condition and write pointer (zones open at
//! the kill come back Closed), so the second bench finds written zones, says so, resets
//! them and runs clean.

mod common;

use std::os::unix::fs::FileExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn znswap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_znswap")).args(args).output().expect("running znswap")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Zones of the device at `path` whose condition is not "empty", read from its file's
/// zone table as it is now (`docs/device-file.md`): the table is a shared mapping of the
/// process driving the device, which stores a zone's condition at each change of it, and
/// which holds the file locked (`znswap device report` would be refused).
fn zones_not_empty_now(path: &str) -> usize {
    let file = std::fs::File::open(path).unwrap();
    let word = |offset: u64, bytes: usize| {
        let mut buffer = [0u8; 8];
        file.read_exact_at(&mut buffer[..bytes], offset).unwrap();
        u64::from_le_bytes(buffer)
    };
    let (zones, table) = (word(24, 4), word(64, 8));
    // Word 0 of each 128-byte entry: its condition, 1 for empty.
    (0..zones).filter(|zone| word(table + zone * 128, 8) != 1).count()
}

/// Whether process `pid` has a userfaultfd open: its pager has started.
fn has_a_userfaultfd(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.filter_map(Result::ok)
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == "anon_inode:[userfaultfd]"))
}

/// Zones of the device at `path` whose condition is not "empty".
fn zones_not_empty(path: &str) -> usize {
    let out = znswap(&["device", "report", "--path", path, "--json"]);
    assert!(out.status.success(), "device report failed: {}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let zones = report["zones"].as_array().expect("a zones array");
    zones.iter().filter(|zone| zone["condition"] != "empty").count()
}

#[test]
fn a_bench_killed_mid_run_leaves_zones_the_next_bench_resets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.zns").to_string_lossy().into_owned();
    let out = znswap(&["device", "create", "--path", &path, "--zones", "16", "--zone-size", "4M"]);
    assert!(out.status.success(), "create failed: {}", text(&out.stderr));
    let bench = |seconds: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_znswap"));
        command.args([
            "bench",
            "--device",
            &path,
            "--memory",
            "8M",
            "--wss",
            "32M",
            "--threads",
            "2",
            "--seconds",
            seconds,
            "--ceiling-seconds",
            "0.2",
            "--json",
        ]);
        command
    };

    // Killed in the workload, once its pager has written zones: the pager starts after
    // the device's ceilings, which reset the device (before, every zone's writes could
    // be theirs), and the warm-up writes 32 MiB through an 8 MiB budget.
    let mut first = bench("60").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("starting the bench");
    common::wait_until(Duration::from_secs(60), "the first bench's pager to write zones", || {
        assert!(first.try_wait().unwrap().is_none(), "the first bench ended before it could be killed");
        has_a_userfaultfd(first.id()) && zones_not_empty_now(&path) > 0
    });
    assert!(first.try_wait().unwrap().is_none(), "the first bench ended before it could be killed");
    first.kill().expect("SIGKILL");
    let status = first.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    // (Ended by the kill, not at the end of its 60 s.)
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let written = zones_not_empty(&path);
    assert!(written > 0, "a bench killed mid-run left every zone empty");

    let second = bench("0.5").output().expect("running the second bench");
    let stderr = text(&second.stderr);
    assert!(second.status.success(), "the bench after the kill failed: {}\n{stderr}", second.status);
    let message = format!("znswap: {path} holds zones written by an earlier run ({written} not empty); resetting them");
    assert!(stderr.contains(&message), "expected {message:?} in:\n{stderr}");
    let result: serde_json::Value = serde_json::from_slice(&second.stdout).expect("bench JSON");
    assert_eq!(result["corrupted"], 0, "{result}");
    assert_eq!(result["lost_pages"], 0, "{result}");
    assert!(result["pages_verified"].as_u64().unwrap() >= 8192, "{result}");
    // The run resets the device when it is done: a third bench has nothing to say.
    assert_eq!(zones_not_empty(&path), 0);
    let third = bench("0.2").output().unwrap();
    assert!(third.status.success() && !text(&third.stderr).contains("earlier run"), "{}", text(&third.stderr));
}
