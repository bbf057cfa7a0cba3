//! Fig. 11 at the tiny scale: the tenant policy keeps the reader's bandwidth when the
//! writer writes and never charges it for GC; per-tenant latencies are recorded.

mod common;

use znswap_core::PolicyKind;
use znswap_sim::paper::scale::{base_config, page_tenant, swap_in_phase, swap_out_phase};
use znswap_sim::run::{run, BackendKind, RunResult, TenantConfig};
use znswap_workload::Workload;

const LIMIT: u64 = 100 << 20;

fn limited(mut tenant: TenantConfig) -> TenantConfig {
    tenant.read_limit_bytes_s = Some(LIMIT);
    tenant.write_limit_bytes_s = Some(LIMIT);
    tenant
}

fn reader() -> TenantConfig {
    let scale = common::scale();
    let memory = scale.cgroup_memory_pages();
    limited(page_tenant("B", Workload::AnonRRand, scale.swap_pages / 10 + memory as u64, memory, 8))
}

fn together(policy: PolicyKind) -> RunResult {
    let scale = common::scale();
    let memory = scale.cgroup_memory_pages();
    let writer = limited(page_tenant("A", Workload::AnonWRand, scale.swap_pages * 3 / 10 + memory as u64, memory, 8));
    let config = base_config(
        &scale,
        11,
        "test-fig11".into(),
        BackendKind::znswap(policy),
        vec![writer, reader()],
        swap_out_phase(&scale, 1.5),
        swap_out_phase(&scale, 0.5),
    );
    run(&config).unwrap()
}

fn alone(policy: PolicyKind) -> RunResult {
    let scale = common::scale();
    let config = base_config(
        &scale,
        11,
        "test-fig11-alone".into(),
        BackendKind::znswap(policy),
        vec![reader()],
        swap_in_phase(&scale, 0.1),
        swap_in_phase(&scale, 0.25),
    );
    run(&config).unwrap()
}

#[test]
fn tenant_policy_reader_keeps_its_bandwidth_and_is_never_charged_for_gc() {
    let both = together(PolicyKind::Tenant);
    let solo = alone(PolicyKind::Tenant);
    for result in [&both, &solo] {
        assert!(result.violations.is_empty(), "{}: {:?}", result.name, result.violations);
        assert_eq!(result.corrupted, 0);
    }
    assert!(both.tenant_gc_bytes_total[0] > 0, "the writer's writes made ZNGC run");
    assert_eq!(both.tenant_gc_bytes_total[1], 0, "ZNGC never moved (nor charged) the reader's data");
    let (with, without) = (both.tenant_swap_in_mib_s[1], solo.tenant_swap_in_mib_s[0]);
    assert!(without > 0.95 * 100.0, "alone, the reader reaches its limit: {without}");
    assert!(with >= 0.95 * without, "the reader with the writer: {with} MiB/s, alone {without}");
    // Per-tenant latencies: the device read is part of the fault.
    for (result, tenant) in [(&both, 1), (&solo, 0)] {
        let (fault, read) = (result.tenant_fault_p50_us[tenant], result.tenant_read_p50_us[tenant]);
        assert!(read > 0.0 && fault >= read, "{}: fault p50 {fault} µs, read p50 {read} µs", result.name);
        assert!(result.tenant_fault_p99_us[tenant] > 0.0);
    }
    // The writer's fault latencies are its own, not the reader's.
    assert!(both.tenant_fault_p99_us[0] > 0.0);
}

#[test]
fn per_core_mixes_the_tenants_so_gc_moves_and_charges_the_reader_too() {
    let both = together(PolicyKind::PerCore);
    assert!(both.violations.is_empty(), "{:?}", both.violations);
    assert_eq!(both.corrupted, 0);
    let (writer, reader) = (both.tenant_gc_bytes_total[0], both.tenant_gc_bytes_total[1]);
    // The reader's pages share zones with the writer's garbage; and as the WAF rises the
    // adaptive swap cache drops the slots of pages it swaps in, so the reader writes them
    // again into zones the per-core policy shares with the writer. ZNGC moves the
    // reader's data too and charges it (the paper's accounting: by owner).
    assert!(both.tenant_swap_out_mib_s[1] > 0.0, "the reader rewrote pages whose slots were dropped");
    assert!(writer > 0 && reader > 0, "ZNGC moved {reader} B of the reader's data, {writer} B of the writer's");
    assert!(both.tenant_gc_cpu_percent[1] > 0.0, "ZNGC's CPU is split by the bytes moved for each tenant");
}
