//! `znswap status`'s answer: the daemon's figures, then each tenant's.

use znswap_pager::PAGE_BYTES;
use znswap_wire::{Channel, DaemonStatus, TenantStatus, ToTenant};

use crate::daemon::Daemon;

/// `znswap status`'s answer: the daemon's figures, then each tenant's.
pub(crate) fn of(daemon: &Daemon) -> (DaemonStatus, Vec<TenantStatus>) {
    let tenants = daemon.tenants.lock().unwrap();
    let stats = daemon.pager.stats();
    let each: Vec<TenantStatus> = tenants
        .iter()
        .map(|tenant| {
            let figures = tenant.figures(daemon.pager.tenant_figures(tenant.index));
            let (fault_p99_ns, _) = daemon.pager.tenant_fault_latency(tenant.index, 0.99);
            let totals = daemon.pager.tenant_fault_times(tenant.index);
            TenantStatus {
                tenant: tenant.index,
                processes: tenant.processes,
                name: tenant.name.clone(),
                processes_joined: tenant.joined,
                budget_pages: tenant.pages,
                resident_pages: figures.resident_pages,
                swap_outs: figures.swap_outs,
                swap_ins: figures.swap_ins,
                gc_bytes: figures.gc_bytes,
                faults: totals.faults,
                fault_p99_ns,
                fault_handled_ns: totals.handled_ns,
                fault_lock_wait_ns: totals.times.lock_wait_ns,
                fault_read_ns: totals.times.read_ns,
                fault_reads: totals.times.reads,
                fault_install_ns: totals.times.install_ns,
                fault_room_wait_ns: totals.times.room_wait_ns,
                fault_other_wait_ns: totals.times.wait_ns + totals.times.unlock_ns,
                written_bytes: figures.written_bytes,
                write_limit: figures.write_limit.unwrap_or(0),
                throttled_ns: figures.throttled_ns,
                grace_bytes: figures.grace_bytes,
                swap_pages: figures.swap_slots,
                swap_limit_pages: figures.swap_limit.unwrap_or(0),
            }
        })
        .collect();
    let status = DaemonStatus {
        pid: std::process::id(),
        tenants: each.len() as u32,
        uptime_ms: daemon.started.elapsed().as_millis() as u64,
        memory_pages: tenants.pool_pages() + stats.compressed_pool_bytes / PAGE_BYTES as u64,
        granted_pages: tenants.granted_pages(),
        resident_pages: stats.core.resident_pages,
        swap_outs: daemon.swapped_out_pages(),
        swap_ins: stats.core.swap_in_reads,
        lost_pages: stats.core.lost_pages,
        host_pages_written: stats.engine.host_pages_written,
        gc_pages_written: stats.engine.gc_pages_written,
        record_pages_written: stats.engine.record_pages_written,
        zone_resets: stats.engine.resets,
        device_bytes: daemon.device_bytes,
        compressed_pool_bytes: stats.compressed_pool_bytes,
        compressed_pool_pages_held: stats.compressed_pool_pages_held,
        compressed_pool_pages_served: stats.compressed_pool_pages_served,
        compressed_pool_stored_raw_bytes: stats.compressed_pool_stored_raw_bytes,
        compressed_pool_stored_bytes: stats.compressed_pool_stored_bytes,
    };
    (status, each)
}

pub(crate) fn send(daemon: &Daemon, channel: &Channel) -> std::io::Result<()> {
    let (status, tenants) = of(daemon);
    channel.send_to_tenant(&ToTenant::Status(status))?;
    for tenant in tenants {
        channel.send_to_tenant(&ToTenant::TenantStatus(tenant))?;
    }
    Ok(())
}
