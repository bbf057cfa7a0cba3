//! The `znswap device` commands as a user runs them.

use std::path::Path;
use std::process::{Command, Output};

fn znswap(args: &[&str], device_env: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_znswap"))
        .args(args)
        .env("ZNSWAP_DEVICE", device_env)
        .output()
        .expect("running znswap")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn create_small(dir: &Path) -> String {
    let path = dir.join("small.zns").to_string_lossy().into_owned();
    let out = znswap(
        &[
            "device",
            "create",
            "--path",
            &path,
            "--zones",
            "6",
            "--zone-size",
            "3M",
            "--zone-capacity",
            "2M",
            "--max-open",
            "3",
        ],
        &dir.join("unused.zns"),
    );
    assert!(out.status.success(), "create failed: {}", text(&out.stderr));
    path
}

#[test]
fn bad_geometry_exits_nonzero_naming_the_field_and_allowed_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.zns").to_string_lossy().into_owned();
    let cases: [(&[&str], &str, &str); 5] = [
        (&["--zones", "4", "--zone-size", "64M", "--zone-capacity", "65M"], "zone-capacity", "at most the zone size"),
        (&["--zones", "0", "--zone-size", "64M"], "zones", "at least 1"),
        (&["--zones", "4", "--zone-size", "64M", "--metadata-bytes", "7"], "metadata-bytes", "0, 8, 16, 64"),
        (
            &["--zones", "4", "--zone-size", "64M", "--write-granularity", "6000"],
            "write-granularity",
            "multiple of the LBA size",
        ),
        (&["--zones", "4", "--zone-size", "64M", "--lba-size", "1000"], "lba-size", "512 or 4096"),
    ];
    for (flags, field, allowed) in cases {
        let mut args = vec!["device", "create", "--path", &path];
        args.extend_from_slice(flags);
        let out = znswap(&args, &dir.path().join("unused.zns"));
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{flags:?} must fail");
        assert!(
            stderr.contains(field) && stderr.contains(allowed),
            "{flags:?}: message {stderr:?} must name {field} and {allowed}"
        );
        assert!(!Path::new(&path).exists(), "a refused create leaves no file");
    }
}

#[test]
fn report_json_has_geometry_and_zones() {
    let dir = tempfile::tempdir().unwrap();
    let path = create_small(dir.path());
    let out = znswap(&["device", "report", "--path", &path, "--json"], &dir.path().join("unused.zns"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["geometry"]["zone_count"], 6);
    assert_eq!(report["geometry"]["zone_capacity_lbas"], 512);
    let zones = report["zones"].as_array().unwrap();
    assert_eq!(zones.len(), 6);
    assert_eq!(zones[1]["start_lba"], 768);
    assert_eq!(zones[1]["condition"], "empty");
    let plain = text(&znswap(&["device", "report", "--path", &path], &dir.path().join("unused.zns")).stdout);
    assert!(plain.contains("1(em)") && plain.contains("6 empty"), "{plain}");
}

#[test]
fn missing_or_foreign_devices_get_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.zns").to_string_lossy().into_owned();
    let out = znswap(&["device", "report", "--path", &missing], &dir.path().join("unused.zns"));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("znswap device create --device"), "{}", text(&out.stderr));
    let foreign = dir.path().join("foreign").to_string_lossy().into_owned();
    std::fs::write(&foreign, vec![7u8; 10000]).unwrap();
    let out = znswap(&["device", "report", "--path", &foreign], &dir.path().join("unused.zns"));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a znswap device file"), "{}", text(&out.stderr));
}

#[test]
fn bench_on_the_default_device_reports_every_figure() {
    let dir = tempfile::tempdir().unwrap();
    let default = dir.path().join("cache").join("default.zns");
    let out = znswap(&["device", "bench", "--seconds", "0.2", "--bytes", "8M", "--json"], &default);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(default.exists(), "the default device is created on first use");
    let bench: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for field in [
        "append_1t_mib_s",
        "append_nt_mib_s",
        "append_nt_one_zone_mib_s",
        "merged_4k_append_mib_s",
        "read_4k_qd1_iops",
        "read_4k_nt_iops",
    ] {
        assert!(bench[field].as_f64().unwrap() > 0.0, "{field} = {}", bench[field]);
    }
    assert!(bench["read_4k_qd1"]["p99_us"].as_f64().unwrap() >= bench["read_4k_qd1"]["p50_us"].as_f64().unwrap());
    assert!(bench["reset"]["count"].as_u64().unwrap() > 0);
    assert!(bench["merge_factor"].as_f64().unwrap() >= 1.0);
    // The bench leaves every zone empty.
    let report = znswap(&["device", "report", "--json"], &default);
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert!(report["zones"].as_array().unwrap().iter().all(|z| z["condition"] == "empty"));
}

#[test]
fn check_passes_on_a_file_device_and_leaves_it_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let path = create_small(dir.path());
    let out = znswap(&["device", "check", "--path", &path], &dir.path().join("unused.zns"));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    let report = znswap(&["device", "report", "--path", &path, "--json"], &dir.path().join("unused.zns"));
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert!(report["zones"]
        .as_array()
        .unwrap()
        .iter()
        .all(|z| z["condition"] != "offline" && z["condition"] != "read-only"));
}

#[test]
fn reset_needs_a_target() {
    let dir = tempfile::tempdir().unwrap();
    let path = create_small(dir.path());
    let out = znswap(&["device", "reset", "--path", &path], &dir.path().join("unused.zns"));
    assert!(!out.status.success() && text(&out.stderr).contains("--zone N, or --all"));
    let out = znswap(&["device", "reset", "--path", &path, "--all"], &dir.path().join("unused.zns"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = znswap(&["device", "reset", "--path", &path, "--zone", "99"], &dir.path().join("unused.zns"));
    assert!(!out.status.success() && text(&out.stderr).contains("zone 99 does not exist"), "{}", text(&out.stderr));
}
