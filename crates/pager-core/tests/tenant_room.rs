//! Each tenant's room for faults within the pager's budget (`set_tenant_budget`).

mod common;

use znswap_core::PolicyKind;
use znswap_pager_core::{Actions, CoreConfig, Fault, FaultKind, FaultStep, PagerCore, PAGE_BYTES};

/// Faults pages of the region at `base` in, one after the other, until one must wait for
/// room (nothing is evicted here); how many were mapped.
fn fill_until_room_wait(core: &mut PagerCore, base: u64, pages: u64, now: &mut u64) -> u64 {
    let mut actions = Actions::with_capacity(Actions::FAULT_MAX);
    for page in 0..pages {
        *now += 1_000;
        let mut fault = Fault::new(base + page * PAGE_BYTES as u64, FaultKind::Missing { write: true });
        match core.fault(&mut fault, *now, &mut actions) {
            FaultStep::Done => actions.clear(),
            FaultStep::WaitRoom { .. } => return page,
            step => panic!("a first touch of page {page} asked {step:?}"),
        }
        core.check_invariants();
    }
    pages
}

#[test]
fn tenants_share_the_slack_so_none_waits_on_the_pagers_budget_within_its_own() {
    // Two tenants of 32 pages each in a pager of 64 with 16 pages of slack: each may
    // map its budget and half the slack (its share) before its faults wait. With the
    // whole slack each, the first filled 48 and the second then waited at 32, on the
    // pager's budget, below its own (a reader beside a writer held back by its write
    // limit did, for 53 µs a fault: `scripts/tenants.sh`).
    let config =
        CoreConfig { budget_pages: 64, slack_pages: 16, tenants: 2, ..common::core_config(PolicyKind::Tenant) };
    let mut core = PagerCore::new(common::geometry(4), false, config).expect("a valid core");
    let (first, second) = (1u64 << 32, 2u64 << 32);
    core.region_add(first, 64, 1, None).expect("a region");
    core.region_add(second, 64, 0, None).expect("a region");
    core.set_tenant_budget(1, Some(32)).unwrap();
    core.set_tenant_budget(0, Some(32)).unwrap();
    let mut now = 1;
    assert_eq!(fill_until_room_wait(&mut core, first, 64, &mut now), 40, "tenant 1: its budget and half the slack");
    assert_eq!(fill_until_room_wait(&mut core, second, 64, &mut now), 40, "tenant 0: the same, beside tenant 1 full");
    assert_eq!(core.tenant_figures(1, now).resident_pages, 40);
    assert_eq!(core.tenant_figures(0, now).resident_pages, 40);
    // A tenant with half the others' budget has half their share.
    core.set_tenant_budget(0, Some(16)).unwrap();
    let mut actions = Actions::with_capacity(Actions::FAULT_MAX);
    let mut fault = Fault::new(second + 63 * PAGE_BYTES as u64, FaultKind::Missing { write: true });
    assert!(matches!(core.fault(&mut fault, now, &mut actions), FaultStep::WaitRoom { .. }), "over 16 + 4");
}
