//! `znswap status`: what a running `znswap daemon` holds and has done, and each tenant's
//! share of it (issue 34). A table by default; `--json` for scripts; `--prometheus` in
//! Prometheus' text format, for a daemon watched by one (a textfile collector, or any
//! exporter that runs a command).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use znswap_wire::{Channel, DaemonStatus, TenantStatus, ToDaemon, ToTenant};
use znswap_zoned::format_size;

use crate::flags::JsonFlag;

const PAGE: u64 = znswap_wire::PAGE_BYTES;

#[derive(Args)]
pub struct StatusArgs {
    /// The daemon's socket [default: /run/znswap/znswap.sock as root, else
    /// $XDG_RUNTIME_DIR/znswap.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(flatten)]
    json: JsonFlag,
    /// Print the figures in Prometheus' text exposition format.
    #[arg(long, conflicts_with = "json")]
    prometheus: bool,
    /// The device's rated endurance in terabytes written (its data sheet's TBW): the
    /// status then says how long it lasts at the rate the daemon has written so far (swap
    /// wears flash: FlashVM's point).
    #[arg(long, value_name = "TB")]
    endurance_tbw: Option<f64>,
}

#[derive(serde::Serialize)]
struct Status {
    socket: String,
    daemon: DaemonFigures,
    tenants: Vec<TenantFigures>,
}

#[derive(serde::Serialize)]
struct DaemonFigures {
    pid: u32,
    uptime_seconds: f64,
    memory_bytes: u64,
    granted_bytes: u64,
    resident_bytes: u64,
    swap_outs: u64,
    swap_ins: u64,
    lost_pages: u64,
    host_bytes_written: u64,
    gc_bytes_written: u64,
    record_bytes_written: u64,
    /// Bytes the device took for every byte of swapped-out data (1 with no GC).
    waf: f64,
    zone_resets: u64,
    device_bytes: u64,
    /// The compressed pool (part of `memory_bytes`; 0: none), the pages it holds, the
    /// pages it served with no device read, and how much the pages it kept shrank.
    compressed_pool_bytes: u64,
    compressed_pool_pages_held: u64,
    compressed_pool_pages_served: u64,
    compressed_pool_ratio: f64,
    /// Bytes written per second since the daemon started.
    write_bytes_per_second: f64,
    /// At that rate, the years a device of `--endurance-tbw` lasts.
    lifetime_years: Option<f64>,
}

#[derive(serde::Serialize)]
struct TenantFigures {
    tenant: u32,
    name: String,
    processes: u32,
    processes_joined: u64,
    budget_bytes: u64,
    resident_bytes: u64,
    swap_outs: u64,
    swap_ins: u64,
    gc_bytes_moved: u64,
    /// Its processes' faults served by the daemon, and their latency's 99th percentile
    /// (from reading the fault to waking the thread).
    faults: u64,
    fault_p99_us: f64,
    /// Where those faults' time went, in seconds summed over them, and the device reads
    /// they made.
    fault_seconds: FaultSeconds,
    fault_reads: u64,
    /// Bytes its swap-outs wrote; its share of the device's writes (bytes a second, its
    /// swap-outs' and the GC's moves of its pages together; none: unlimited), and how
    /// long it waited for that share.
    written_bytes: u64,
    write_limit_bytes_per_second: Option<u64>,
    throttled_seconds: f64,
    /// Bytes let through past its share when it was held back longest (a round each
    /// half second held).
    write_grace_bytes: u64,
    /// Its pages on the device (swapped out, or kept as their swap cache), and its swap
    /// limit.
    swap_bytes: u64,
    swap_limit_bytes: Option<u64>,
}

/// A tenant's faults' time, in seconds summed over its faults: all of it (from the
/// daemon reading a fault to the wake-up), and the parts: waiting for the daemon's state
/// lock, device reads, installing pages, waiting for room in its budget, the other
/// waits (a page on its way out, the lock's release). What is left of `handled` is
/// the daemon's own work on the fault.
#[derive(serde::Serialize)]
pub(crate) struct FaultSeconds {
    handled: f64,
    lock_wait: f64,
    read: f64,
    install: f64,
    room_wait: f64,
    other_wait: f64,
}

impl FaultSeconds {
    pub(crate) fn of(t: &TenantStatus) -> FaultSeconds {
        let seconds = |ns: u64| ns as f64 / 1e9;
        FaultSeconds {
            handled: seconds(t.fault_handled_ns),
            lock_wait: seconds(t.fault_lock_wait_ns),
            read: seconds(t.fault_read_ns),
            install: seconds(t.fault_install_ns),
            room_wait: seconds(t.fault_room_wait_ns),
            other_wait: seconds(t.fault_other_wait_ns),
        }
    }

    /// The mean fault's time in the daemon and the share of it spent reading the
    /// device, over `faults`: `310 µs, 82 % read` (`-` for none).
    pub(crate) fn mean(&self, faults: u64) -> String {
        if faults == 0 || self.handled <= 0.0 {
            return "-".to_string();
        }
        format!("{:.0} µs, {:.0} % read", self.handled * 1e6 / faults as f64, 100.0 * self.read / self.handled)
    }

    fn parts(&self) -> [(&'static str, f64); 6] {
        [
            ("handled", self.handled),
            ("lock_wait", self.lock_wait),
            ("read", self.read),
            ("install", self.install),
            ("room_wait", self.room_wait),
            ("other_wait", self.other_wait),
        ]
    }
}

pub fn run(args: StatusArgs) -> Result<()> {
    anyhow::ensure!(
        args.endurance_tbw.is_none_or(|tbw| tbw.is_finite() && tbw > 0.0),
        "--endurance-tbw must be a positive number of terabytes"
    );
    let socket = args.socket.clone().unwrap_or_else(znswap_daemon::default_socket);
    let asked = Channel::connect(&socket).map_err(anyhow::Error::from).and_then(|channel| ask(&channel));
    let (daemon, tenants) = asked.with_context(|| {
        format!(
            "no znswap daemon answers at {}: start one with `znswap daemon`, or give its socket with --socket",
            socket.display()
        )
    })?;
    let status = figures(&socket, &daemon, &tenants, args.endurance_tbw);
    if args.json.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else if args.prometheus {
        print!("{}", prometheus(&status));
    } else {
        print!("{}", table(&status, args.endurance_tbw));
    }
    Ok(())
}

/// The daemon's answer to `Status` on `channel`: its figures and each tenant's (also
/// asked by `znswap run --daemon` for its summary, on the connection holding its tenant).
pub fn ask(channel: &Channel) -> Result<(DaemonStatus, Vec<TenantStatus>)> {
    channel.send_to_daemon(&ToDaemon::Status, &[])?;
    let daemon = match channel.recv_to_tenant()? {
        Some(ToTenant::Status(daemon)) => daemon,
        Some(ToTenant::Refused(reason)) => bail!("the daemon refused: {}", reason.explain()),
        other => bail!("the daemon answered {other:?}"),
    };
    let mut tenants = Vec::with_capacity(daemon.tenants as usize);
    for _ in 0..daemon.tenants {
        match channel.recv_to_tenant()? {
            Some(ToTenant::TenantStatus(tenant)) => tenants.push(tenant),
            other => bail!("the daemon answered {other:?} for a tenant's figures"),
        }
    }
    Ok((daemon, tenants))
}

fn figures(socket: &std::path::Path, d: &DaemonStatus, tenants: &[TenantStatus], tbw: Option<f64>) -> Status {
    let uptime_seconds = d.uptime_ms as f64 / 1000.0;
    let host = d.host_pages_written * PAGE;
    let written = (d.host_pages_written + d.gc_pages_written + d.record_pages_written) * PAGE;
    let write_bytes_per_second = if uptime_seconds > 0.0 { written as f64 / uptime_seconds } else { 0.0 };
    const YEAR_SECONDS: f64 = 365.25 * 24.0 * 3600.0;
    let lifetime_years =
        tbw.filter(|_| write_bytes_per_second > 0.0).map(|tbw| tbw * 1e12 / write_bytes_per_second / YEAR_SECONDS);
    Status {
        socket: socket.display().to_string(),
        daemon: DaemonFigures {
            pid: d.pid,
            uptime_seconds,
            memory_bytes: d.memory_pages * PAGE,
            granted_bytes: d.granted_pages * PAGE,
            resident_bytes: d.resident_pages * PAGE,
            swap_outs: d.swap_outs,
            swap_ins: d.swap_ins,
            lost_pages: d.lost_pages,
            host_bytes_written: host,
            gc_bytes_written: d.gc_pages_written * PAGE,
            record_bytes_written: d.record_pages_written * PAGE,
            waf: znswap_core::waf(host, written),
            zone_resets: d.zone_resets,
            device_bytes: d.device_bytes,
            compressed_pool_bytes: d.compressed_pool_bytes,
            compressed_pool_pages_held: d.compressed_pool_pages_held,
            compressed_pool_pages_served: d.compressed_pool_pages_served,
            compressed_pool_ratio: znswap_zoned::compression_ratio(
                d.compressed_pool_stored_raw_bytes,
                d.compressed_pool_stored_bytes,
            ),
            write_bytes_per_second,
            lifetime_years,
        },
        tenants: tenants
            .iter()
            .map(|t| TenantFigures {
                tenant: t.tenant,
                name: t.name.as_str().to_string(),
                processes: t.processes,
                processes_joined: t.processes_joined,
                budget_bytes: t.budget_pages * PAGE,
                resident_bytes: t.resident_pages * PAGE,
                swap_outs: t.swap_outs,
                swap_ins: t.swap_ins,
                gc_bytes_moved: t.gc_bytes,
                faults: t.faults,
                fault_p99_us: t.fault_p99_ns as f64 / 1000.0,
                fault_seconds: FaultSeconds::of(t),
                fault_reads: t.fault_reads,
                written_bytes: t.written_bytes,
                write_limit_bytes_per_second: (t.write_limit > 0).then_some(t.write_limit),
                throttled_seconds: t.throttled_ns as f64 / 1e9,
                write_grace_bytes: t.grace_bytes,
                swap_bytes: t.swap_pages * PAGE,
                swap_limit_bytes: (t.swap_limit_pages > 0).then_some(t.swap_limit_pages * PAGE),
            })
            .collect(),
    }
}

fn table(s: &Status, tbw: Option<f64>) -> String {
    let d = &s.daemon;
    let mut out = format!("znswap daemon (pid {}) at {}, up {}\n", d.pid, s.socket, uptime(d.uptime_seconds));
    let mut line = |name: &str, value: String| out.push_str(&format!("  {name:<10} {value}\n"));
    line(
        "memory",
        format!(
            "{} granted of {} to {} tenants; {} resident",
            format_size(d.granted_bytes),
            format_size(d.memory_bytes),
            s.tenants.len(),
            format_size(d.resident_bytes)
        ),
    );
    line("swap", format!("{} pages swapped out, {} read back, {} lost", d.swap_outs, d.swap_ins, d.lost_pages));
    line(
        "device",
        format!(
            "{}; written {} for swap-outs, {} by the GC, {} of records: WAF {:.2}; {} zone resets",
            format_size(d.device_bytes),
            format_size(d.host_bytes_written),
            format_size(d.gc_bytes_written),
            format_size(d.record_bytes_written),
            d.waf,
            d.zone_resets
        ),
    );
    if d.compressed_pool_bytes > 0 {
        line(
            "pool",
            format!(
                "{} compressed (of the memory): {} pages held, {:.1}x smaller; {} pages served with no device read",
                format_size(d.compressed_pool_bytes),
                d.compressed_pool_pages_held,
                d.compressed_pool_ratio,
                d.compressed_pool_pages_served
            ),
        );
    }
    match (tbw, d.lifetime_years) {
        (Some(tbw), Some(years)) => line(
            "wear",
            format!(
                "{}/s written since the start: a device rated {tbw} TBW lasts {years:.1} years at that rate",
                format_size(d.write_bytes_per_second as u64)
            ),
        ),
        (Some(_), None) => line("wear", "nothing written yet".into()),
        (None, _) => {}
    }
    if s.tenants.is_empty() {
        out.push_str("  no tenants (programs start as tenants with `znswap run --daemon -- CMD`)\n");
        return out;
    }
    out.push_str(&format!(
        "\n  {:>6}  {:<20} {:>9} {:>10} {:>10} {:>20} {:>12} {:>12} {:>10} {:>10} {:>12} {:>18} {:>16}\n",
        "tenant",
        "name",
        "processes",
        "budget",
        "resident",
        "on device",
        "swapped out",
        "read back",
        "written",
        "GC moved",
        "fault p99",
        "fault mean",
        "write limit"
    ));
    for t in &s.tenants {
        let limit = match t.write_limit_bytes_per_second {
            None => "-".to_string(),
            Some(rate) => format!("{}/s ({:.0} s)", format_size(rate), t.throttled_seconds),
        };
        let on_device = match t.swap_limit_bytes {
            Some(limit) => format!("{} / {}", format_size(t.swap_bytes), format_size(limit)),
            None => format_size(t.swap_bytes),
        };
        out.push_str(&format!(
            "  {:>6}  {:<20} {:>9} {:>10} {:>10} {:>20} {:>12} {:>12} {:>10} {:>10} {:>12} {:>18} {:>16}\n",
            t.tenant,
            t.name,
            format!("{} / {}", t.processes, t.processes_joined),
            format_size(t.budget_bytes),
            format_size(t.resident_bytes),
            on_device,
            t.swap_outs,
            t.swap_ins,
            format_size(t.written_bytes),
            format_size(t.gc_bytes_moved),
            if t.faults == 0 { "-".to_string() } else { format!("{:.0} µs", t.fault_p99_us) },
            t.fault_seconds.mean(t.faults),
            limit
        ));
    }
    out.push_str(
        "  (processes: served now / since the tenant began; on device: its pages there, and its swap limit; swapped \
         out and read back: pages; fault mean: a fault's time in the daemon and the share of it in device reads; \
         write limit: its swap-outs' and GC moves' bytes a second, and the time it \
         waited for them)\n",
    );
    out
}

/// `2h 03m`, `4m 10s`, `12.3 s`.
fn uptime(seconds: f64) -> String {
    let whole = seconds as u64;
    match whole {
        0..60 => format!("{seconds:.1} s"),
        60..3600 => format!("{}m {:02}s", whole / 60, whole % 60),
        _ => format!("{}h {:02}m", whole / 3600, whole / 60 % 60),
    }
}

/// Prometheus' text format: a HELP and TYPE line per metric, then its samples.
fn prometheus(s: &Status) -> String {
    let d = &s.daemon;
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
        out.push_str(&format!("# HELP znswap_{name} {help}\n# TYPE znswap_{name} {kind}\n"));
        for (labels, value) in samples {
            out.push_str(&format!("znswap_{name}{labels} {value}\n"));
        }
    };
    let one = |value: f64| vec![(String::new(), value)];
    metric("uptime_seconds", "gauge", "Seconds since the daemon started.", &one(d.uptime_seconds));
    metric("memory_bytes", "gauge", "The daemon's --memory.", &one(d.memory_bytes as f64));
    metric("granted_bytes", "gauge", "Memory granted to tenants.", &one(d.granted_bytes as f64));
    metric("resident_bytes", "gauge", "Served heaps' bytes in memory.", &one(d.resident_bytes as f64));
    metric("swapped_out_pages_total", "counter", "Pages swapped out.", &one(d.swap_outs as f64));
    metric("swapped_in_pages_total", "counter", "Pages read back from the device.", &one(d.swap_ins as f64));
    metric("lost_pages_total", "counter", "Pages lost to device errors.", &one(d.lost_pages as f64));
    metric(
        "device_written_bytes_total",
        "counter",
        "Bytes written to the device, by whom.",
        &[
            ("{by=\"swap_out\"}".to_string(), d.host_bytes_written as f64),
            ("{by=\"gc\"}".to_string(), d.gc_bytes_written as f64),
            ("{by=\"records\"}".to_string(), d.record_bytes_written as f64),
        ],
    );
    metric("zone_resets_total", "counter", "Zones reset.", &one(d.zone_resets as f64));
    metric(
        "compressed_pool_bytes",
        "gauge",
        "The compressed pool's size (0: none).",
        &one(d.compressed_pool_bytes as f64),
    );
    metric(
        "compressed_pool_pages",
        "gauge",
        "Pages the compressed pool holds.",
        &one(d.compressed_pool_pages_held as f64),
    );
    metric(
        "compressed_pool_served_pages_total",
        "counter",
        "Pages read from the compressed pool, with no device read.",
        &one(d.compressed_pool_pages_served as f64),
    );
    metric(
        "compressed_pool_ratio",
        "gauge",
        "Bytes of the pages the pool kept over their bytes compressed.",
        &one(d.compressed_pool_ratio),
    );
    metric("device_bytes", "gauge", "The device's usable size.", &one(d.device_bytes as f64));
    let each = |value: &dyn Fn(&TenantFigures) -> f64| -> Vec<(String, f64)> {
        s.tenants
            .iter()
            .map(|t| (format!("{{tenant=\"{}\",name=\"{}\"}}", t.tenant, label_value(&t.name)), value(t)))
            .collect()
    };
    metric("tenant_processes", "gauge", "A tenant's processes served now.", &each(&|t| t.processes as f64));
    metric("tenant_budget_bytes", "gauge", "A tenant's grant of memory.", &each(&|t| t.budget_bytes as f64));
    metric("tenant_resident_bytes", "gauge", "A tenant's bytes in memory.", &each(&|t| t.resident_bytes as f64));
    metric(
        "tenant_swapped_out_pages_total",
        "counter",
        "A tenant's pages swapped out.",
        &each(&|t| t.swap_outs as f64),
    );
    metric("tenant_swapped_in_pages_total", "counter", "A tenant's pages read back.", &each(&|t| t.swap_ins as f64));
    metric(
        "tenant_gc_moved_bytes_total",
        "counter",
        "Bytes of a tenant's data the GC moved (charged to it).",
        &each(&|t| t.gc_bytes_moved as f64),
    );
    metric(
        "tenant_swap_bytes",
        "gauge",
        "A tenant's pages on the device (swapped out, or kept as their swap cache).",
        &each(&|t| t.swap_bytes as f64),
    );
    metric(
        "tenant_written_bytes_total",
        "counter",
        "Bytes a tenant's swap-outs wrote.",
        &each(&|t| t.written_bytes as f64),
    );
    metric(
        "tenant_write_throttled_seconds_total",
        "counter",
        "Time a tenant's swap-outs waited for its write limit.",
        &each(&|t| t.throttled_seconds),
    );
    metric("tenant_faults_total", "counter", "A tenant's faults the daemon served.", &each(&|t| t.faults as f64));
    let parts: Vec<(String, f64)> = s
        .tenants
        .iter()
        .flat_map(|t| {
            t.fault_seconds.parts().map(|(part, seconds)| {
                (format!("{{tenant=\"{}\",name=\"{}\",part=\"{part}\"}}", t.tenant, label_value(&t.name)), seconds)
            })
        })
        .collect();
    metric(
        "tenant_fault_seconds_total",
        "counter",
        "Where a tenant's faults spent their time in the daemon: all of it (handled) and its parts.",
        &parts,
    );
    metric(
        "tenant_fault_p99_seconds",
        "gauge",
        "The 99th percentile of a tenant's fault latency.",
        &each(&|t| t.fault_p99_us / 1e6),
    );
    out
}

/// A label value as the text format writes it: backslash and double quote escaped (a
/// tenant's name has no control characters, so no newline).
fn label_value(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use znswap_wire::Name;

    fn status() -> Status {
        let daemon = DaemonStatus {
            pid: 7,
            tenants: 1,
            uptime_ms: 10_000,
            memory_pages: 1024,
            granted_pages: 512,
            resident_pages: 500,
            swap_outs: 100,
            swap_ins: 40,
            lost_pages: 0,
            host_pages_written: 100,
            gc_pages_written: 25,
            record_pages_written: 0,
            zone_resets: 3,
            device_bytes: 1 << 30,
            compressed_pool_bytes: 1 << 20,
            compressed_pool_pages_held: 700,
            compressed_pool_pages_served: 30,
            compressed_pool_stored_raw_bytes: 4096 * 900,
            compressed_pool_stored_bytes: 1024 * 900,
        };
        let tenant = TenantStatus {
            tenant: 2,
            processes: 1,
            name: Name::new("a \"quoted\\ name").unwrap(),
            processes_joined: 4,
            budget_pages: 512,
            resident_pages: 500,
            swap_outs: 100,
            swap_ins: 40,
            gc_bytes: 25 * PAGE,
            faults: 60,
            fault_p99_ns: 250_000,
            fault_handled_ns: 6_000_000,
            fault_lock_wait_ns: 100_000,
            fault_read_ns: 4_500_000,
            fault_reads: 50,
            fault_install_ns: 200_000,
            fault_room_wait_ns: 0,
            fault_other_wait_ns: 300_000,
            written_bytes: 90 * PAGE,
            write_limit: 8 << 20,
            throttled_ns: 3_000_000_000,
            grace_bytes: 0,
            swap_pages: 30,
            swap_limit_pages: 256,
        };
        figures(std::path::Path::new("/s"), &daemon, &[tenant], Some(600.0))
    }

    #[test]
    fn the_figures_are_derived_from_the_daemons() {
        let s = status();
        assert_eq!(s.daemon.waf, 1.25);
        let rate = 125.0 * PAGE as f64 / 10.0;
        assert_eq!(s.daemon.write_bytes_per_second, rate);
        let years = s.daemon.lifetime_years.unwrap();
        assert!((years - 600e12 / rate / (365.25 * 86400.0)).abs() < 1e-6, "{years}");
        let table = table(&s, Some(600.0));
        assert!(table.contains("WAF 1.25") && table.contains("600 TBW lasts"), "{table}");
        assert!(table.contains("1 / 4"), "processes now / joined: {table}");
        assert!(table.contains("250 µs"), "the tenant's fault p99: {table}");
        assert!(table.contains("100 µs, 75 % read"), "the tenant's fault mean and its reads' share: {table}");
        assert!(table.contains("8 MiB/s (3 s)"), "the tenant's write limit and its wait: {table}");
        assert!(table.contains("120 KiB / 1 MiB"), "the tenant's pages on the device and its swap limit: {table}");
        assert!(
            table.contains("1 MiB compressed (of the memory): 700 pages held, 4.0x smaller; 30 pages served"),
            "{table}"
        );
    }

    #[test]
    fn prometheus_text_has_each_metric_typed_and_labels_escaped() {
        let text = prometheus(&status());
        assert!(text.contains("# TYPE znswap_tenant_resident_bytes gauge\n"), "{text}");
        assert!(
            text.contains("znswap_tenant_resident_bytes{tenant=\"2\",name=\"a \\\"quoted\\\\ name\"} 2048000\n"),
            "{text}"
        );
        assert!(text.contains("znswap_device_written_bytes_total{by=\"gc\"} 102400\n"), "{text}");
        assert!(text.contains("znswap_compressed_pool_served_pages_total 30\n"), "{text}");
        assert!(text.contains("znswap_compressed_pool_ratio 4\n"), "{text}");
        assert!(
            text.contains(
                "znswap_tenant_fault_seconds_total{tenant=\"2\",name=\"a \\\"quoted\\\\ name\",part=\"read\"} 0.0045\n"
            ),
            "{text}"
        );
        // Every sample line belongs to a metric declared above it.
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.insert(rest.split(' ').next().unwrap().to_string());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(declared.contains(name), "{line}");
            }
        }
    }
}
