//! Every swap-in of a ZNSwap run returns the last version written (the host's oracle),
//! with GC, the swap cache, hot/cold streams and tenant limits in play.

mod common;

use znswap_core::PolicyKind;
use znswap_sim::paper::scale::{base_config, page_tenant, swap_out_phase};
use znswap_sim::run::{run, BackendKind, RunResult};
use znswap_workload::Workload;

fn assert_clean(result: &RunResult) {
    assert!(result.violations.is_empty(), "{}: {:?}", result.name, result.violations);
    assert_eq!(result.corrupted, 0, "{}: pages swapped in with the wrong data", result.name);
    assert!(result.pages_verified > 1000, "{}: only {} swap-ins verified", result.name, result.pages_verified);
}

#[test]
fn znswap_per_core_at_high_utilization_is_clean_and_collects() {
    // 80 %: the GC runs all the time.
    let result = run(&common::wrand(80, common::zns(), 3)).unwrap();
    assert_clean(&result);
    assert!(result.device.host_gc_pages_written > 0, "the GC moved pages");
    assert!(result.waf > 1.2, "GC copies show in the WAF: {}", result.waf);
    assert_eq!(result.device_waf, 1.0, "a ZNS device never copies");
}

#[test]
fn hot_cold_with_skewed_reads_and_writes_is_clean() {
    let scale = common::scale();
    let pages = scale.swap_pages * 320 / 512;
    let workload = Workload::Hotspot { hot_percent: 20, hot_access_percent: 80, read_percent: 50 };
    let tenant = page_tenant("skewed", workload, pages, (pages / 5) as u32, scale.threads);
    let config = base_config(
        &scale,
        5,
        "test-hotcold".into(),
        BackendKind::znswap(PolicyKind::HotCold),
        vec![tenant],
        swap_out_phase(&scale, scale.warmup_swaps),
        swap_out_phase(&scale, scale.measure_swaps),
    );
    let result = run(&config).unwrap();
    assert_clean(&result);
    assert!(result.host.swap_out_clean > 0, "reads leave clean swap-cached pages to drop without writing");
}

#[test]
fn two_throttled_tenants_are_clean_and_limited() {
    let scale = common::scale();
    let memory = scale.cgroup_memory_pages();
    let mut writer = page_tenant("A", Workload::AnonWRand, scale.swap_pages * 3 / 10 + memory as u64, memory, 8);
    let mut reader = page_tenant("B", Workload::AnonRRand, scale.swap_pages / 10 + memory as u64, memory, 8);
    for tenant in [&mut writer, &mut reader] {
        tenant.read_limit_bytes_s = Some(100 << 20);
        tenant.write_limit_bytes_s = Some(100 << 20);
    }
    let config = base_config(
        &scale,
        9,
        "test-tenants".into(),
        BackendKind::znswap(PolicyKind::Tenant),
        vec![writer, reader],
        swap_out_phase(&scale, 0.6),
        swap_out_phase(&scale, 0.2),
    );
    let result = run(&config).unwrap();
    assert_clean(&result);
    for tenant in 0..2 {
        let (read, written) = (result.tenant_swap_in_mib_s[tenant], result.tenant_swap_out_mib_s[tenant]);
        assert!(read <= 104.0 && written <= 104.0, "tenant {tenant} over its 100 MiB/s limit: {read} / {written}");
    }
    assert!(result.tenant_swap_in_mib_s[1] > 20.0, "the reader reads");
    assert_eq!(result.tenant_gc_mib_s[1], 0.0, "the tenant policy never moves the reader's data");
}
