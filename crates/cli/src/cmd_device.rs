//! `znswap device create | report | reset | check`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use znswap_zoned::conformance::{run_all, Harness, Outcome};
use znswap_zoned::{
    format_size, CreateOptions, DeviceCounters, FileDevice, Geometry, WithoutFaultInjection, ZoneCondition, ZoneInfo,
    ZonedDevice,
};

use crate::device_path;
use crate::stats::Table;

pub struct CreateRequest {
    pub path: PathBuf,
    pub zones: u32,
    pub zone_size_bytes: u64,
    pub zone_capacity_bytes: Option<u64>,
    pub max_open: u32,
    pub max_active: Option<u32>,
    pub lba_bytes: u32,
    pub metadata_bytes: u32,
    pub write_granularity_bytes: Option<u64>,
    pub zone_append_max_bytes: Option<u64>,
    pub force: bool,
}

fn to_u32(field: &'static str, value: u64) -> Result<u32> {
    u32::try_from(value).with_context(|| format!("invalid geometry: {field} = {value}: must be below 4 GiB"))
}

pub fn create(request: CreateRequest) -> Result<()> {
    let granularity = to_u32("write-granularity", request.write_granularity_bytes.unwrap_or(request.lba_bytes as u64))?;
    let mut geometry = Geometry::from_bytes(
        request.lba_bytes,
        request.metadata_bytes,
        request.zones,
        request.zone_size_bytes,
        request.zone_capacity_bytes.unwrap_or(request.zone_size_bytes),
        request.max_open,
        request.max_active.unwrap_or(request.max_open),
        granularity,
    )?;
    if let Some(limit) = request.zone_append_max_bytes {
        geometry.zone_append_max_bytes = to_u32("zone-append-max", limit)?;
        geometry.validate()?;
    }
    let device = FileDevice::create(&request.path, geometry, CreateOptions { force: request.force })?;
    if std::fs::metadata(&request.path).is_ok_and(|m| m.file_type().is_file()) {
        crate::device_path::warn_if_storage_short(&request.path, &geometry);
    }
    println!(
        "created {}: {}, {}",
        request.path.display(),
        geometry_summary(&geometry),
        if device.is_direct() { "O_DIRECT" } else { "buffered I/O" },
    );
    Ok(())
}

fn geometry_summary(geometry: &Geometry) -> String {
    format!(
        "{} zones of {} ({} capacity), {} B LBAs + {} B metadata, max open {} / active {}",
        geometry.zone_count,
        format_size(geometry.zone_size_bytes()),
        format_size(geometry.zone_capacity_bytes()),
        geometry.lba_bytes,
        geometry.metadata_bytes,
        limit_text(geometry.max_open_zones),
        limit_text(geometry.max_active_zones),
    )
}

fn limit_text(limit: u32) -> String {
    if limit == 0 {
        "unlimited".into()
    } else {
        limit.to_string()
    }
}

#[derive(Serialize)]
struct ZoneReport {
    #[serde(flatten)]
    info: ZoneInfo,
    resets: u64,
    bytes_written: u64,
}

#[derive(Serialize)]
struct DeviceReport {
    device: String,
    geometry: Geometry,
    capacity_bytes: u64,
    counters: DeviceCounters,
    zones: Vec<ZoneReport>,
}

pub fn report(path: Option<&Path>, json: bool) -> Result<()> {
    let device = device_path::open(path)?;
    let geometry = *device.geometry();
    let zones = device
        .report_zones()?
        .into_iter()
        .map(|info| {
            let counters = device.zone_counters(info.zone)?;
            Ok(ZoneReport { info, resets: counters.resets, bytes_written: counters.bytes_written })
        })
        .collect::<Result<Vec<_>>>()?;
    let report = DeviceReport {
        device: device.describe(),
        geometry,
        capacity_bytes: geometry.capacity_bytes(),
        counters: device.counters(),
        zones,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{}: {}", report.device, geometry_summary(&geometry));
    println!("(start, len, cap and wp in LBAs of {} B, as blkzone prints them in sectors)", geometry.lba_bytes);
    let mut table = Table::new(&["zone", "start", "len", "cap", "wp", "cond", "resets"]);
    for zone in &report.zones {
        let info = &zone.info;
        table.row(vec![
            info.zone.to_string(),
            format!("{:#011x}", info.start_lba),
            format!("{:#08x}", info.len_lbas),
            format!("{:#08x}", info.capacity_lbas),
            format!("{:#08x}", info.write_pointer_lba - info.start_lba),
            format!("{}({})", info.condition.code(), info.condition.short_name()),
            zone.resets.to_string(),
        ]);
    }
    print!("{}", table.render());
    let count = |wanted: fn(ZoneCondition) -> bool| report.zones.iter().filter(|z| wanted(z.info.condition)).count();
    println!(
        "{} empty, {} open, {} closed, {} full, {} failed; {} written, {} read, {} resets since creation",
        count(|c| c == ZoneCondition::Empty),
        count(ZoneCondition::is_open),
        count(|c| c == ZoneCondition::Closed),
        count(|c| c == ZoneCondition::Full),
        count(|c| matches!(c, ZoneCondition::ReadOnly | ZoneCondition::Offline)),
        format_size(report.counters.bytes_written),
        format_size(report.counters.bytes_read),
        report.counters.resets,
    );
    Ok(())
}

pub fn reset(path: Option<&Path>, zone: Option<u32>, all: bool) -> Result<()> {
    let device = device_path::open(path)?;
    match (zone, all) {
        (Some(zone), false) => {
            device.reset(zone).with_context(|| format!("resetting zone {zone}"))?;
            println!("zone {zone} reset");
        }
        (None, true) => {
            let busy = device.report_zones()?.iter().filter(|z| z.condition != ZoneCondition::Empty).count();
            device.reset_all()?;
            println!("{busy} zones reset");
        }
        _ => bail!("say which zones to reset: --zone N, or --all"),
    }
    device.sync()?;
    Ok(())
}

/// Runs the conformance suite on a real device by path: each check starts from a
/// device with every zone reset, and "reopen" closes and opens the path again.
struct PathHarness {
    path: Option<PathBuf>,
}

impl Harness for PathHarness {
    fn fresh(&mut self) -> Box<dyn ZonedDevice> {
        let device = device_path::open(self.path.as_deref()).expect("the device opened before the checks began");
        device.reset_all().expect("resetting the device between checks");
        // Injected faults persist on a file device: never break a user's zones.
        Box::new(WithoutFaultInjection(device))
    }

    fn reopen(&mut self, device: Box<dyn ZonedDevice>) -> Option<Box<dyn ZonedDevice>> {
        drop(device);
        Some(Box::new(WithoutFaultInjection(device_path::open(self.path.as_deref()).expect("reopening the device"))))
    }
}

#[derive(Serialize)]
struct CheckLine {
    check: &'static str,
    outcome: &'static str,
    detail: Option<String>,
}

pub fn check(path: Option<&Path>, json: bool) -> Result<bool> {
    // Fail early, with the real error, if the device cannot be opened at all.
    let device = device_path::open(path)?;
    let description = device.describe();
    let geometry = *device.geometry();
    drop(device);
    let mut harness = PathHarness { path: path.map(Path::to_path_buf) };
    let results = run_all(&mut harness);
    let lines: Vec<CheckLine> = results
        .into_iter()
        .map(|(check, result)| match result {
            Ok(Outcome::Passed) => CheckLine { check, outcome: "passed", detail: None },
            Ok(Outcome::NotApplicable(why)) => CheckLine { check, outcome: "not-applicable", detail: Some(why.into()) },
            Err(message) => CheckLine { check, outcome: "failed", detail: Some(message) },
        })
        .collect();
    let passed = lines.iter().filter(|l| l.outcome == "passed").count();
    let failed = lines.iter().filter(|l| l.outcome == "failed").count();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "device": description, "geometry": geometry, "checks": lines, "passed": passed, "failed": failed,
            }))?
        );
    } else {
        println!("conformance suite on {description}");
        for line in &lines {
            match &line.detail {
                Some(detail) => println!("  {:<36} {} ({detail})", line.check, line.outcome),
                None => println!("  {:<36} {}", line.check, line.outcome),
            }
        }
        println!("conformance: {passed} passed, {failed} failed");
    }
    Ok(failed == 0)
}
