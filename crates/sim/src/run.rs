//! One simulated run: a host with its tenants on one back end, a warm-up phase and a
//! measured window, and the numbers of that window.

use serde::Serialize;
use znswap_core::{PolicyKind, SwapCacheMode, PAGE_BYTES};
use znswap_flash::{BlockConfig, ZnsConfig};
use znswap_linux_swap::Discard;

use crate::backend::{Backend, BackendCounters, PageId};
use crate::calib::CpuCosts;
use crate::events::{Ns, MILLISECOND_NS, SECOND_NS};
use crate::host::{Host, HostCounters, HostSetup, TenantSetup};
use crate::linux::{LinuxBackend, LinuxBackendError, LinuxSetup};
use crate::metrics::Sample;
use crate::source::Source;
use crate::throttle::Throttle;
use crate::workloads::WorkSpec;
use crate::znswap::{ZnsBackend, ZnsBackendError, ZnsSetup};

const MIB: f64 = (1u64 << 20) as f64;

/// Why a run could not run; the run's name is the caller's to add.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error("a run needs at least one tenant")]
    NoTenant,
    #[error("cpus must be at least 1")]
    NoCpus,
    #[error("over-provisioning {over_provisioning} must be within 0..=1")]
    OverProvisioning { over_provisioning: f64 },
    #[error("{pages} pages is too many for the host's page ids")]
    TooManyPages { pages: u64 },
    #[error("tenant {tenant}: needs threads >= 1 and a page per thread")]
    TenantThreads { tenant: String },
    #[error("tenant {tenant}: memory must be at least 64 pages")]
    TenantMemory { tenant: String },
    #[error("the ZNSwap back end cannot be built")]
    Znswap(#[from] ZnsBackendError),
    #[error("the Linux back end cannot be built")]
    Linux(#[from] LinuxBackendError),
}

/// Which swap system, with its knobs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum BackendKind {
    Znswap { policy: PolicyKind, gc_streams: u32, swap_cache: SwapCacheMode },
    Linux { discard: DiscardMode, swap_full_cutoff: f64 },
}

/// `znswap_linux_swap::Discard`, serializable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DiscardMode {
    None,
    Pages,
    Fine8,
}

impl DiscardMode {
    fn model(self) -> Discard {
        match self {
            DiscardMode::None => Discard::None,
            DiscardMode::Pages => Discard::Pages,
            DiscardMode::Fine8 => Discard::Fine8,
        }
    }
}

impl BackendKind {
    pub fn znswap(policy: PolicyKind) -> BackendKind {
        let gc_streams = policy.gc_streams();
        BackendKind::Znswap { policy, gc_streams, swap_cache: SwapCacheMode::Adaptive }
    }

    pub fn linux(discard: DiscardMode) -> BackendKind {
        BackendKind::Linux { discard, swap_full_cutoff: 0.5 }
    }

    /// Short label for tables and plots.
    pub fn label(&self) -> String {
        match self {
            BackendKind::Znswap { policy, .. } => match policy {
                PolicyKind::PerCore => "ZNSwap per-core".into(),
                PolicyKind::HotCold => "ZNSwap hot/cold".into(),
                PolicyKind::Lifetime => "ZNSwap lifetime".into(),
                PolicyKind::Tenant => "ZNSwap tenant".into(),
            },
            BackendKind::Linux { discard, .. } => match discard {
                DiscardMode::None => "Block SSD".into(),
                DiscardMode::Pages => "Block SSD + 512-slot TRIM".into(),
                DiscardMode::Fine8 => "Block SSD + 8-slot TRIM".into(),
            },
        }
    }
}

/// One tenant (cgroup): its region, memory, threads and limits.
#[derive(Clone, Debug, Serialize)]
pub struct TenantConfig {
    pub name: String,
    pub work: WorkSpec,
    /// Pages of the region (the working set).
    pub pages: u64,
    pub memory_pages: u32,
    pub threads: u32,
    /// Accesses per thread before it ends (None: until the run stops).
    pub accesses_per_thread: Option<u64>,
    /// `blk-throttle` limits, bytes per second.
    pub read_limit_bytes_s: Option<u64>,
    pub write_limit_bytes_s: Option<u64>,
    /// Tenant policy: this tenant's slot limit.
    pub slot_limit: Option<u64>,
    /// CPU per request besides its page accesses (key-value servers).
    pub request_cpu_ns: Ns,
    /// CPU per access when the benchmark does more than touch the page (pmbench);
    /// `None`: `CpuCosts::access_ns`.
    pub access_cpu_ns: Option<Ns>,
}

/// When a phase ends: the first limit reached (each counts from the phase's start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Phase {
    pub swap_out_bytes: Option<u64>,
    pub swap_in_bytes: Option<u64>,
    pub requests: Option<u64>,
    pub virtual_ns: Option<Ns>,
}

impl Phase {
    pub fn swap_out(bytes: u64, virtual_ns: Ns) -> Phase {
        Phase { swap_out_bytes: Some(bytes), virtual_ns: Some(virtual_ns), ..Phase::default() }
    }

    pub fn swap_in(bytes: u64, virtual_ns: Ns) -> Phase {
        Phase { swap_in_bytes: Some(bytes), virtual_ns: Some(virtual_ns), ..Phase::default() }
    }

    pub fn time(virtual_ns: Ns) -> Phase {
        Phase { virtual_ns: Some(virtual_ns), ..Phase::default() }
    }

    fn reached(&self, start: &(Ns, HostCounters), host: &Host) -> bool {
        let (started, counters) = start;
        let now = &host.counters;
        let bytes = |pages: u64| pages * PAGE_BYTES as u64;
        self.swap_out_bytes.is_some_and(|limit| bytes(now.swap_out_writes - counters.swap_out_writes) >= limit)
            || self.swap_in_bytes.is_some_and(|limit| bytes(now.swap_ins - counters.swap_ins) >= limit)
            || self.requests.is_some_and(|limit| now.requests - counters.requests >= limit)
            || self.virtual_ns.is_some_and(|limit| host.now() - started >= limit)
            || host.threads_running() == 0
    }
}

/// Everything one run needs.
#[derive(Clone, Debug, Serialize)]
pub struct RunConfig {
    pub name: String,
    pub seed: u64,
    pub backend: BackendKind,
    /// The nominal swap size (the swap partition; utilization is relative to it).
    pub swap_pages: u64,
    /// Spare flash beyond the swap size: 0.12 in the paper's setup for both SSDs.
    pub over_provisioning: f64,
    /// ZNS zones (capacity = swap × (1 + OP) / zones, size = capacity / 0.526).
    pub zones: u32,
    pub cpus: u32,
    pub costs: CpuCosts,
    pub tenants: Vec<TenantConfig>,
    pub warmup: Phase,
    pub measure: Phase,
    pub sample_ns: Ns,
    /// Precondition the block SSD (every LBA written once) before the run.
    pub precondition: bool,
}

/// The measured window of a run.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub name: String,
    pub backend: String,
    pub seed: u64,
    /// Length of the measured window, virtual seconds.
    pub window_s: f64,
    pub swap_out_mib_s: f64,
    pub swap_in_mib_s: f64,
    pub tenant_swap_in_mib_s: Vec<f64>,
    pub tenant_swap_out_mib_s: Vec<f64>,
    pub tenant_gc_mib_s: Vec<f64>,
    /// Per tenant, host GC bytes moved on its behalf since the run began (warm-up included).
    pub tenant_gc_bytes_total: Vec<u64>,
    pub tenant_requests_per_s: Vec<f64>,
    pub tenant_request_p99_us: Vec<f64>,
    /// Per tenant, major fault latency (throttle wait included), p50 and p99.
    pub tenant_fault_p50_us: Vec<f64>,
    pub tenant_fault_p99_us: Vec<f64>,
    /// Per tenant, swap-in read latency at the device (after blk-throttle), p50 and p99.
    pub tenant_read_p50_us: Vec<f64>,
    pub tenant_read_p99_us: Vec<f64>,
    /// All media writes / swap-out writes (device GC copies or ZNGC copies included).
    pub waf: f64,
    /// The device's own media writes / writes it received (1 on ZNS).
    pub device_waf: f64,
    /// Data on swap / swap size, at the end of the window.
    pub utilization: f64,
    pub fault_p50_us: f64,
    pub fault_p99_us: f64,
    pub requests_per_s: f64,
    pub request_p50_us: f64,
    pub request_p99_us: f64,
    /// Host GC (ZNGC) CPU in % of one core.
    pub gc_cpu_percent: f64,
    /// TRIM dispatch CPU in % of one core.
    pub trim_cpu_percent: f64,
    /// Reclaim CPU (kswapd + direct) in % of one core.
    pub reclaim_cpu_percent: f64,
    pub tenant_gc_cpu_percent: Vec<f64>,
    pub pages_verified: u64,
    pub corrupted: u64,
    pub violations: Vec<String>,
    pub host: HostCounters,
    pub device: BackendCounters,
    pub series: Vec<Sample>,
}

impl RunConfig {
    pub fn total_pages(&self) -> u64 {
        self.tenants.iter().map(|tenant| tenant.pages).sum()
    }

    /// Checks the config; the error says what to change.
    pub fn validate(&self) -> Result<(), RunError> {
        if self.tenants.is_empty() {
            return Err(RunError::NoTenant);
        }
        if self.cpus == 0 {
            return Err(RunError::NoCpus);
        }
        if !(0.0..=1.0).contains(&self.over_provisioning) {
            return Err(RunError::OverProvisioning { over_provisioning: self.over_provisioning });
        }
        if self.total_pages() >= PageId::MAX as u64 / 2 {
            return Err(RunError::TooManyPages { pages: self.total_pages() });
        }
        for tenant in &self.tenants {
            if tenant.threads == 0 || tenant.pages < tenant.threads as u64 {
                return Err(RunError::TenantThreads { tenant: tenant.name.clone() });
            }
            if tenant.memory_pages < 64 {
                return Err(RunError::TenantMemory { tenant: tenant.name.clone() });
            }
        }
        Ok(())
    }

    fn zns_device(&self) -> ZnsConfig {
        zns_device_for(self.swap_pages, self.over_provisioning, self.zones)
    }

    fn build_backend(&self) -> Result<(Box<dyn Backend>, Ns), RunError> {
        let regions = self.regions();
        match self.backend {
            BackendKind::Znswap { policy, gc_streams, swap_cache } => {
                let limits: Vec<u64> =
                    self.tenants.iter().map(|tenant| tenant.slot_limit.unwrap_or(u64::MAX)).collect();
                let setup = ZnsSetup {
                    device: self.zns_device(),
                    policy,
                    gc_streams,
                    swap_cache,
                    regions,
                    tenants: self.tenants.len() as u32,
                    tenant_slot_limits: Some(limits),
                    swap_pages: self.swap_pages,
                    costs: self.costs,
                };
                Ok((Box::new(ZnsBackend::new(setup)?), 0))
            }
            BackendKind::Linux { discard, swap_full_cutoff } => {
                let device = BlockConfig { over_provisioning: self.over_provisioning, ..BlockConfig::default() };
                let setup = LinuxSetup {
                    device,
                    discard: discard.model(),
                    cpus: self.cpus,
                    swap_pages: self.swap_pages,
                    host_pages: self.total_pages(),
                    swap_full_cutoff,
                    page_cluster: znswap_linux_swap::PAGE_CLUSTER_DEFAULT,
                    seed: self.seed,
                    costs: self.costs,
                    precondition: self.precondition,
                };
                let backend = LinuxBackend::new(setup)?;
                let start = backend.start_ns();
                Ok((Box::new(backend), start))
            }
        }
    }

    fn regions(&self) -> Vec<(PageId, PageId, u16)> {
        let mut first = 0;
        self.tenants
            .iter()
            .enumerate()
            .map(|(index, tenant)| {
                let region = (first as PageId, tenant.pages as PageId, index as u16);
                first += tenant.pages;
                region
            })
            .collect()
    }

    fn host_setup(&self, start_ns: Ns) -> HostSetup {
        let tenants = self
            .tenants
            .iter()
            .enumerate()
            .map(|(index, tenant)| {
                let seed = self.seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let threads: Vec<(u64, Box<dyn Source>)> = (0..tenant.threads)
                    .map(|thread| {
                        let thread_seed = seed.wrapping_add((thread as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9));
                        tenant.work.source(
                            tenant.pages,
                            tenant.threads,
                            thread,
                            thread_seed,
                            tenant.accesses_per_thread,
                        )
                    })
                    .collect();
                let throttle = match (tenant.read_limit_bytes_s, tenant.write_limit_bytes_s) {
                    (None, None) => None,
                    (read, write) => Some(Throttle::new(read.unwrap_or(u64::MAX / 4), write.unwrap_or(u64::MAX / 4))),
                };
                TenantSetup {
                    pages: tenant.pages,
                    memory_pages: tenant.memory_pages,
                    threads,
                    throttle,
                    request_ns: tenant.request_cpu_ns,
                    access_ns: tenant.access_cpu_ns.unwrap_or(self.costs.access_ns),
                }
            })
            .collect();
        HostSetup {
            cpus: self.cpus,
            costs: self.costs,
            reclaim_batch: 32,
            tenants,
            sample_ns: self.sample_ns,
            start_ns,
        }
    }
}

/// The ZNS SSD for a swap of `swap_pages` with `over_provisioning` spare: `zones` zones
/// whose capacities add up to swap × (1 + OP), in whole NAND stripes (8 pages per
/// program unit × 32 dies), each zone's size its capacity / (1077/2048) like the ZN540.
pub fn zns_device_for(swap_pages: u64, over_provisioning: f64, zones: u32) -> ZnsConfig {
    let data_pages = (swap_pages as f64 * (1.0 + over_provisioning)).ceil() as u64;
    let stripe = 256;
    let capacity_pages = data_pages.div_ceil(zones as u64).div_ceil(stripe) * stripe;
    ZnsConfig::scaled(zones, capacity_pages * PAGE_BYTES as u64)
}

/// Runs the warm-up, then the measured window. Deterministic: a function of `config`.
pub fn run(config: &RunConfig) -> Result<RunResult, RunError> {
    config.validate()?;
    let (backend, start_ns) = config.build_backend()?;
    let mut host = Host::new(config.host_setup(start_ns), backend);
    // Virtual time bounds every phase, so a stuck run still ends (and says so).
    let limit = |phase: &Phase| phase.virtual_ns.unwrap_or(3600 * SECOND_NS);
    let warmup_start = (host.now(), host.counters.clone());
    host.run_until(start_ns + limit(&config.warmup) + MILLISECOND_NS, |host| {
        config.warmup.reached(&warmup_start, host)
    });
    let window_start_ns = host.now();
    let host_before = host.counters.clone();
    let device_before = host.backend().counters();
    let gc_before = host.backend().tenant_gc_bytes();
    host.fault_latency = Default::default();
    host.request_latency = Default::default();
    for histogram in host
        .tenant_request_latency
        .iter_mut()
        .chain(host.tenant_fault_latency.iter_mut())
        .chain(host.tenant_read_latency.iter_mut())
    {
        *histogram = Default::default();
    }
    let measure_start = (host.now(), host.counters.clone());
    host.run_until(window_start_ns + limit(&config.measure) + MILLISECOND_NS, |host| {
        config.measure.reached(&measure_start, host)
    });
    let mut violations = host.violations.clone();
    violations.extend(host.backend_mut().check());
    Ok(summarize(config, &host, window_start_ns, &host_before, &device_before, &gc_before, violations))
}

fn summarize(
    config: &RunConfig,
    host: &Host,
    window_start_ns: Ns,
    before: &HostCounters,
    device_before: &BackendCounters,
    gc_before: &[u64],
    violations: Vec<String>,
) -> RunResult {
    let seconds = ((host.now() - window_start_ns) as f64 / 1e9).max(1e-9);
    let after = &host.counters;
    let device = host.backend().counters();
    let mib_s = |pages: u64| pages as f64 * PAGE_BYTES as f64 / MIB / seconds;
    let percent = |ns: Ns| ns as f64 / (seconds * 1e9) * 100.0;
    let tenants = config.tenants.len();
    let written = device.swap_out_pages_written - device_before.swap_out_pages_written;
    let media = device.media_pages_written - device_before.media_pages_written;
    let device_host = device.device_host_pages_written - device_before.device_host_pages_written;
    let gc_after = host.backend().tenant_gc_bytes();
    let window_device = BackendCounters {
        swap_out_pages_written: written,
        swap_in_pages_read: device.swap_in_pages_read - device_before.swap_in_pages_read,
        media_pages_written: media,
        device_host_pages_written: device_host,
        host_gc_pages_written: device.host_gc_pages_written - device_before.host_gc_pages_written,
        host_gc_pages_read: device.host_gc_pages_read - device_before.host_gc_pages_read,
        host_gc_victims: device.host_gc_victims - device_before.host_gc_victims,
        trim_commands: device.trim_commands - device_before.trim_commands,
        trim_pages: device.trim_pages - device_before.trim_pages,
        erases: device.erases - device_before.erases,
        slots_used: device.slots_used,
        device_live_pages: device.device_live_pages,
        slots_capacity: device.slots_capacity,
        records_rejected: device.records_rejected - device_before.records_rejected,
    };
    let window_host = host_counters_since(after, before);
    let us = |ns: Ns| ns as f64 / 1e3;
    RunResult {
        name: config.name.clone(),
        backend: config.backend.label(),
        seed: config.seed,
        window_s: seconds,
        swap_out_mib_s: mib_s(window_host.swap_out_writes),
        swap_in_mib_s: mib_s(window_host.swap_ins),
        tenant_swap_in_mib_s: window_host.tenant_swap_in_pages.iter().map(|&pages| mib_s(pages)).collect(),
        tenant_swap_out_mib_s: window_host.tenant_swap_out_pages.iter().map(|&pages| mib_s(pages)).collect(),
        tenant_gc_mib_s: (0..tenants)
            .map(|t| {
                let moved = gc_after.get(t).copied().unwrap_or(0) - gc_before.get(t).copied().unwrap_or(0);
                moved as f64 / MIB / seconds
            })
            .collect(),
        tenant_gc_bytes_total: (0..tenants).map(|t| gc_after.get(t).copied().unwrap_or(0)).collect(),
        tenant_requests_per_s: window_host.tenant_requests.iter().map(|&count| count as f64 / seconds).collect(),
        tenant_request_p99_us: host.tenant_request_latency.iter().map(|h| us(h.quantile(0.99))).collect(),
        tenant_fault_p50_us: host.tenant_fault_latency.iter().map(|h| us(h.quantile(0.5))).collect(),
        tenant_fault_p99_us: host.tenant_fault_latency.iter().map(|h| us(h.quantile(0.99))).collect(),
        tenant_read_p50_us: host.tenant_read_latency.iter().map(|h| us(h.quantile(0.5))).collect(),
        tenant_read_p99_us: host.tenant_read_latency.iter().map(|h| us(h.quantile(0.99))).collect(),
        waf: if written == 0 { 1.0 } else { media as f64 / written as f64 },
        device_waf: if device_host == 0 { 1.0 } else { media as f64 / device_host as f64 },
        utilization: device.slots_used as f64 / device.slots_capacity.max(1) as f64,
        fault_p50_us: us(host.fault_latency.quantile(0.5)),
        fault_p99_us: us(host.fault_latency.quantile(0.99)),
        requests_per_s: window_host.requests as f64 / seconds,
        request_p50_us: us(host.request_latency.quantile(0.5)),
        request_p99_us: us(host.request_latency.quantile(0.99)),
        gc_cpu_percent: percent(window_host.cpu_gc_ns),
        trim_cpu_percent: percent(window_host.cpu_discard_ns),
        reclaim_cpu_percent: percent(window_host.cpu_kswapd_ns + window_host.cpu_reclaim_direct_ns),
        tenant_gc_cpu_percent: window_host.tenant_gc_cpu_ns.iter().map(|&ns| percent(ns)).collect(),
        pages_verified: window_host.pages_verified,
        corrupted: after.corrupted,
        violations,
        host: window_host,
        device: window_device,
        series: host.series.clone(),
    }
}

fn host_counters_since(after: &HostCounters, before: &HostCounters) -> HostCounters {
    let vec_since = |a: &[u64], b: &[u64]| a.iter().zip(b).map(|(x, y)| x - y).collect::<Vec<u64>>();
    HostCounters {
        accesses: after.accesses - before.accesses,
        requests: after.requests - before.requests,
        faults_zero: after.faults_zero - before.faults_zero,
        faults_major: after.faults_major - before.faults_major,
        faults_shared: after.faults_shared - before.faults_shared,
        swap_out_writes: after.swap_out_writes - before.swap_out_writes,
        swap_out_clean: after.swap_out_clean - before.swap_out_clean,
        swap_outs_aborted: after.swap_outs_aborted - before.swap_outs_aborted,
        swap_ins: after.swap_ins - before.swap_ins,
        readahead_pages: after.readahead_pages - before.readahead_pages,
        tenant_swap_in_pages: vec_since(&after.tenant_swap_in_pages, &before.tenant_swap_in_pages),
        tenant_swap_out_pages: vec_since(&after.tenant_swap_out_pages, &before.tenant_swap_out_pages),
        tenant_requests: vec_since(&after.tenant_requests, &before.tenant_requests),
        cpu_app_ns: after.cpu_app_ns - before.cpu_app_ns,
        cpu_reclaim_direct_ns: after.cpu_reclaim_direct_ns - before.cpu_reclaim_direct_ns,
        cpu_kswapd_ns: after.cpu_kswapd_ns - before.cpu_kswapd_ns,
        cpu_gc_ns: after.cpu_gc_ns - before.cpu_gc_ns,
        cpu_discard_ns: after.cpu_discard_ns - before.cpu_discard_ns,
        tenant_gc_cpu_ns: vec_since(&after.tenant_gc_cpu_ns, &before.tenant_gc_cpu_ns),
        pages_verified: after.pages_verified - before.pages_verified,
        corrupted: after.corrupted - before.corrupted,
        backpressure: after.backpressure - before.backpressure,
    }
}
