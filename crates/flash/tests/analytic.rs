//! The analytic models against known values, and the block SSD's FTL against the models.

use znswap_flash::analytic::{
    alpha_from_utilization, fifo_victim_valid_fraction, fifo_waf, greedy_waf, harmonic, lambert_w0,
};

#[test]
fn lambert_w0_inverts_w_exp_w() {
    for &x in &[-0.367_879, -0.36, -0.3, -0.2, -0.1, -1e-6, 1e-9, 0.1, 0.5, 1.0, 2.0, 10.0, 1e3, 1e8] {
        let w = lambert_w0(x);
        assert!(w >= -1.0, "W0({x}) = {w} is off the principal branch");
        let back = w * w.exp();
        assert!((back - x).abs() <= 1e-12 * (1.0 + x.abs()), "W0({x}) = {w}: w e^w = {back}");
    }
    // Known values: W0(1) = Ω (omega constant), W0(e) = 1, W0(-1/e) = -1.
    assert!((lambert_w0(1.0) - 0.567_143_290_409_783_8).abs() < 1e-14);
    assert!((lambert_w0(std::f64::consts::E) - 1.0).abs() < 1e-14);
    assert!((lambert_w0(-(-1.0f64).exp()) + 1.0).abs() < 1e-6);
}

#[test]
fn harmonic_matches_the_sum_at_integers() {
    let mut sum = 0.0;
    for k in 1..=300u32 {
        sum += 1.0 / k as f64;
        assert!((harmonic(k as f64) - sum).abs() < 1e-12, "H({k})");
    }
    assert!(harmonic(0.0).abs() < 1e-12);
}

#[test]
fn fifo_limit_solves_its_fixed_point() {
    for &u in &[0.5, 0.7, 0.8, 0.9, 0.935] {
        let alpha = alpha_from_utilization(u);
        let x = fifo_victim_valid_fraction(alpha);
        assert!((x - (-alpha * (1.0 - x)).exp()).abs() < 1e-12, "u = {u}: x = {x}");
    }
    // u = 0.8: iterating x ← e^(-1.25(1-x)) from 0.5 settles at x = 0.628630, A = 2.692731.
    assert!((fifo_waf(1.25) - 2.692_731).abs() < 1e-5, "{}", fifo_waf(1.25));
}

#[test]
fn greedy_tends_to_the_fifo_limit_and_beats_it_for_small_blocks() {
    for &u in &[0.5, 0.8, 0.935] {
        let alpha = alpha_from_utilization(u);
        let limit = fifo_waf(alpha);
        let mut previous = 1.0;
        for &np in &[4, 16, 64, 256, 4096, 1 << 20] {
            let a = greedy_waf(alpha, np);
            assert!(a < limit, "u = {u}, Np = {np}: greedy {a} should beat FIFO {limit}");
            assert!(a >= previous - 1e-9, "greedy WAF grows with Np (u = {u}, Np = {np})");
            previous = a;
        }
        assert!((previous - limit).abs() / limit < 1e-3, "Np → ∞: {previous} vs {limit}");
    }
    assert_eq!(greedy_waf(20.0, 64), 1.0, "plenty of spare: greedy always finds an empty block");
}

use znswap_flash::waf::{block_uniform_overwrite, WafError, WafReport, WafRun};
use znswap_flash::{BlockConfigError, Victim};

/// 1024 superblocks of 64 pages: 64 Ki physical pages, quick even in debug builds.
const PAGES_PER_BLOCK: u32 = 64;

fn relative_error(report: &WafReport, model: f64) -> f64 {
    (report.waf - model).abs() / model
}

#[test]
fn greedy_ftl_matches_desnoyers_model() {
    for (u, tolerance) in [(0.5, 0.03), (0.6, 0.03), (0.7, 0.03), (0.8, 0.03), (0.9, 0.03), (0.935, 0.05)] {
        let report = block_uniform_overwrite(u, PAGES_PER_BLOCK, 7, &WafRun::default()).unwrap();
        let error = relative_error(&report, report.model_greedy_waf);
        assert!(
            error < tolerance,
            "u = {u}: measured WAF {:.4}, greedy model {:.4} at α_eff {:.4} ({:.2} % off)",
            report.waf,
            report.model_greedy_waf,
            report.alpha_effective,
            100.0 * error
        );
        // The spare the FTL keeps aside (free reserve, open write points) is small.
        assert!(report.alpha_effective < report.alpha_nominal && report.alpha_effective > 0.99 * report.alpha_nominal);
        assert_eq!(report.media_pages, report.host_pages + report.gc_pages_copied);
    }
}

#[test]
fn fifo_ftl_matches_the_large_block_limit() {
    let run = WafRun { victim: Victim::Fifo, ..WafRun::default() };
    for u in [0.5, 0.7, 0.8, 0.9] {
        let report = block_uniform_overwrite(u, PAGES_PER_BLOCK, 11, &run).unwrap();
        let error = relative_error(&report, report.model_fifo_waf);
        assert!(
            error < 0.02,
            "u = {u}: FIFO measured {:.4}, limit {:.4} ({:.2} % off)",
            report.waf,
            report.model_fifo_waf,
            100.0 * error
        );
        // Greedy with small blocks beats FIFO by a margin the models also predict.
        assert!(report.waf > report.model_greedy_waf);
    }
}

#[test]
fn trim_lowers_waf_to_the_reduced_utilization() {
    let (u, f) = (0.9, 0.3);
    let trimmed = WafRun { trim_fraction: f, ..WafRun::default() };
    let report = block_uniform_overwrite(u, PAGES_PER_BLOCK, 3, &trimmed).unwrap();
    let reduced = 1.0 / (u * (1.0 - f));
    assert!(
        (report.alpha_nominal - reduced).abs() / reduced < 0.01,
        "live pages after the trim give α {:.4}, expected {reduced:.4}",
        report.alpha_nominal
    );
    let error = relative_error(&report, report.model_greedy_waf);
    assert!(
        error < 0.03,
        "after trimming {f} of the data: WAF {:.4}, greedy model at u(1-f) {:.4} ({:.2} % off)",
        report.waf,
        report.model_greedy_waf,
        100.0 * error
    );
    let untrimmed = block_uniform_overwrite(u, PAGES_PER_BLOCK, 3, &WafRun::default()).unwrap();
    assert!(
        report.waf < 0.5 * untrimmed.waf,
        "trim must pay off: {:.3} with trim vs {:.3} without",
        report.waf,
        untrimmed.waf
    );
}

#[test]
fn waf_runs_are_deterministic_in_the_seed() {
    let run = WafRun { superblocks: 256, measure_rounds: 1, warmup_rounds_max: 3, ..WafRun::default() };
    let a = block_uniform_overwrite(0.8, 64, 5, &run).unwrap();
    let b = block_uniform_overwrite(0.8, 64, 5, &run).unwrap();
    let c = block_uniform_overwrite(0.8, 64, 6, &run).unwrap();
    assert_eq!(a, b);
    assert_ne!(a.media_pages, c.media_pages, "a different seed draws different pages");
}

#[test]
fn bad_waf_arguments_are_refused_with_a_reason() {
    let run = WafRun::default();
    assert_eq!(block_uniform_overwrite(1.2, 64, 1, &run).unwrap_err(), WafError::Utilization { utilization: 1.2 });
    let tiny = WafRun { superblocks: 10, ..WafRun::default() };
    assert!(matches!(
        block_uniform_overwrite(0.5, 64, 1, &tiny),
        Err(WafError::Device(BlockConfigError::TooFewSuperblocks { superblocks: 10, .. }))
    ));
}
