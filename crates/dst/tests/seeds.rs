//! A modest number of seeds, quick in the test profile. CI runs more through the CLI
//! (`znswap dst --seed S --ops N`) or `cargo run --release -p znswap-dst --example dst`.

use znswap_dst::{run, DstOptions, Scenario};

fn check(options: &DstOptions) {
    let report = run(options);
    assert!(report.passed(), "seed {} failed: {:?}\nscenario: {:?}", report.seed, report.violations, report.scenario);
    assert_eq!(report.corrupted, 0);
}

/// Seeds 0..200 in four tests, which the test harness runs side by side.
fn random_seeds_hold_the_oracle(seeds: std::ops::Range<u64>) {
    for seed in seeds {
        let mut options = DstOptions::new(seed, 20_000);
        options.check_every_ops = 2_000;
        check(&options);
    }
}

#[test]
fn random_seeds_hold_the_oracle_0() {
    random_seeds_hold_the_oracle(0..50);
}

#[test]
fn random_seeds_hold_the_oracle_1() {
    random_seeds_hold_the_oracle(50..100);
}

#[test]
fn random_seeds_hold_the_oracle_2() {
    random_seeds_hold_the_oracle(100..150);
}

#[test]
fn random_seeds_hold_the_oracle_3() {
    random_seeds_hold_the_oracle(150..200);
}

#[test]
fn same_seed_same_run() {
    let options = DstOptions::new(7, 10_000);
    let (first, second) = (run(&options), run(&options));
    assert_eq!(first.stats, second.stats);
    assert_eq!(first.pages_verified, second.pages_verified);
    assert_eq!(first.scenario, second.scenario);
}

#[test]
fn offline_zone_loses_only_what_it_held() {
    // Seeds whose scenario takes zones offline: lost pages are reported, never wrong.
    let mut seen = 0;
    for seed in 100..160 {
        let mut options = DstOptions::new(seed, 20_000);
        options.check_every_ops = 5_000;
        let report = run(&options);
        assert!(report.passed(), "seed {seed}: {:?}", report.violations);
        if report.zones_taken_offline > 0 {
            seen += 1;
        }
    }
    assert!(seen > 0, "no seed took a zone offline");
}

#[test]
fn uniform_overwrites_at_ten_percent_need_no_copies() {
    let mut scenario =
        Scenario::overwrite(0.1, znswap_core::VictimSelection::Greedy, znswap_core::PolicyKind::PerCore, false);
    scenario.geometry.zone_count = 64;
    scenario.geometry.zone_capacity_pages = 256;
    scenario.owner_pages = Some(64 * 256 / 10);
    let mut options = DstOptions::new(1, 64 * 256 * 3);
    options.scenario = Some(scenario);
    options.warmup_ops = 64 * 256;
    let report = run(&options);
    assert!(report.passed(), "{:?}", report.violations);
    assert!(report.waf <= 1.01, "waf {}", report.waf);
}

#[test]
fn every_policy_encoding_and_victim_selection() {
    use znswap_core::{PolicyKind, VictimSelection};
    let mut seed = 1000;
    for policy in PolicyKind::ALL {
        for footer in [false, true] {
            for selection in [VictimSelection::Greedy, VictimSelection::CostBenefit] {
                seed += 1;
                let mut rng = znswap_dst::scenario::rng(seed);
                let mut scenario = Scenario::random(&mut rng);
                scenario.policy = policy;
                scenario.gc_streams = policy.gc_streams();
                scenario.footer = footer;
                scenario.victim_selection = selection;
                scenario.utilization = 0.6;
                let mut options = DstOptions::new(seed, 30_000);
                options.scenario = Some(scenario);
                options.check_every_ops = 3_000;
                let report = run(&options);
                assert!(
                    report.passed(),
                    "seed {seed} {policy:?} footer {footer} {selection:?}: {:?}",
                    report.violations
                );
                assert!(report.pages_verified > 0);
            }
        }
    }
}

/// Random seeds of both DSTs run the lifetime policy, the engine's with its three GC
/// streams.
#[test]
fn random_seeds_run_lifetime() {
    use znswap_core::PolicyKind;
    let engine = (1..=400)
        .map(|seed| Scenario::random(&mut znswap_dst::scenario::rng(seed)))
        .filter(|scenario| scenario.policy == PolicyKind::Lifetime && scenario.gc_streams == 3)
        .count();
    assert!(engine >= 20, "{engine} of 400 engine seeds run lifetime with 3 GC streams");
    let pager = (1..=200)
        .map(|seed| znswap_dst::pager::PagerScenario::random(&mut znswap_dst::scenario::rng(seed ^ 0x9a9e_5eed)))
        .filter(|scenario| scenario.policy == PolicyKind::Lifetime)
        .count();
    assert!(pager >= 10, "{pager} of 200 pager seeds run lifetime");
}

/// The GC's progress guard stopped a run, and the same call picked new victims: the GC
/// never stopped, its own moves counting as the invalidations its stall waited for,
/// and a completion pump never settled (seeds 115 and 141 of CI's run found it).
#[test]
fn gc_progress_guard_stops_the_run() {
    let report = run(&DstOptions::new(141, 200_000));
    assert!(report.passed(), "seed 141: {:?}", report.violations);
    assert!(report.stats.gc_runs > 0);
}

/// Every seed's scenario reaches the GC through its cold-owner cycles, whatever its
/// utilization and zone size; here, seeds whose workload alone never filled the device.
#[test]
fn cold_cycles_bring_low_utilization_and_small_zones_to_the_gc() {
    for seed in [10007, 10011, 10019, 10062] {
        let mut options = DstOptions::new(seed, 100_000);
        options.check_every_ops = 25_000;
        let report = run(&options);
        assert!(report.passed(), "seed {seed}: {:?}", report.violations);
        assert!(report.cold_cycles >= 2, "seed {seed}: {} cold cycles", report.cold_cycles);
        assert!(report.stats.gc_runs > 0, "seed {seed} never ran the GC: {:?}", report.scenario);
    }
}

/// The pager DST: seeds of both fault modes hold the oracle and the page-table checks,
/// and a seed replays exactly.
#[test]
fn pager_seeds_hold_the_oracle_and_replay() {
    use znswap_dst::pager::{run, PagerDstOptions, PagerFaultMode};
    let mut modes = [0u32; 2];
    for seed in 0..40 {
        let mut options = PagerDstOptions::new(seed, 40_000);
        options.check_every_steps = 5_000;
        let report = run(&options);
        assert!(report.passed(), "pager seed {seed} failed: {:?}\nscenario: {:?}", report.violations, report.scenario);
        assert!(report.pages_verified > 0, "pager seed {seed} verified nothing");
        modes[(report.scenario.fault_mode == PagerFaultMode::SelfPaging) as usize] += 1;
    }
    assert!(modes[0] > 0 && modes[1] > 0, "both fault modes are drawn: {modes:?}");
    let (first, second) = (run(&PagerDstOptions::new(7, 30_000)), run(&PagerDstOptions::new(7, 30_000)));
    assert_eq!(first.core, second.core);
    assert_eq!((first.ops, first.pages_verified), (second.ops, second.pages_verified));
}

/// Pages altered on the device: sealed, each is reported lost when read and never
/// delivered (the oracle holds); unsealed, the same alterations reach the program as
/// wrong bytes, which the oracle catches (so the first half can fail).
#[test]
fn pager_altered_pages_are_lost_when_sealed_and_corrupt_when_not() {
    use znswap_dst::pager::{run, PagerDstOptions, PagerScenario};
    let (mut failed_open, mut corrupted) = (0, 0);
    for seed in 0..12 {
        let mut scenario = PagerScenario::random(&mut znswap_dst::scenario::rng(seed ^ 0x9a9e_5eed));
        scenario.faults.altered_pages = 8;
        scenario.faults.offline_zones = 0;
        scenario.encrypt = true;
        let mut options = PagerDstOptions::new(seed, 40_000);
        options.scenario = Some(scenario.clone());
        let sealed = run(&options);
        assert!(sealed.passed(), "sealed seed {seed}: {:?}", sealed.violations);
        assert_eq!(sealed.corrupted, 0);
        failed_open += sealed.coverage.pages_failed_open;
        scenario.encrypt = false;
        options.scenario = Some(scenario);
        corrupted += run(&options).corrupted;
    }
    assert!(failed_open > 0, "no altered page was read back in 12 sealed seeds");
    assert!(corrupted > 0, "altered pages never reached an unsealed program: the fault does nothing");
}
