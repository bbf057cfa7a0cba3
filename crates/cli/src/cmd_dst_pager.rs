//! `znswap dst --pager`: deterministic simulation of the live pager. Each seed picks a
//! scenario (fault mode, threads, regions, budget, device, faults) and interleaves the
//! pager core's actors over a model of the page tables and the device; every read is
//! checked against the last write.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use znswap_dst::pager::{run, PagerDstOptions, PagerDstReport};

use crate::progress::Progress;
use crate::stats::Table;

#[derive(Serialize)]
struct SeedLine<'a> {
    #[serde(flatten)]
    report: &'a PagerDstReport,
    seconds: f64,
}

/// What a multi-seed run exercised, over all seeds.
#[derive(Default, Serialize)]
struct PagerCoverage {
    seeds: u64,
    seeds_self_paging: u64,
    seeds_handler_threads: u64,
    seeds_with_gc: u64,
    seeds_with_lost_pages: u64,
    seeds_with_swap_full: u64,
    seeds_with_region_churn: u64,
    swap_ins_verified_min: u64,
    swap_ins_verified: u64,
    writes_racing_write_outs: u64,
    swap_cache_dirtied: u64,
    swap_cache_skipped: u64,
    evictions_raced: u64,
    fault_discards: u64,
    addresses_reused: u64,
    injected_errors: u64,
    corrupted: u64,
    seeds_with_program_discards: u64,
    program_discards: u64,
    program_discards_under_lock: u64,
    discarded_unmapped: u64,
    discarded_resident: u64,
    discarded_evicting: u64,
    discarded_writing: u64,
    discarded_dropping: u64,
    discarded_poisoned: u64,
    discarded_removed: u64,
    zapped_under_core: u64,
    window_accesses: u64,
    zero_fills_landed: u64,
    zero_fills_refused: u64,
    forks: u64,
    budget_changes: u64,
    tenant_budget_changes: u64,
    tenant_victims: u64,
    write_limit_changes: u64,
    write_throttled_ms: u64,
    swap_limit_changes: u64,
    swap_limit_overruns: u64,
    child_reads_slot: u64,
    child_reads_zero: u64,
    child_reads_shadow: u64,
    served_children: u64,
    inherited_reads: u64,
    seeds_with_late_agents: u64,
    discards_late: u64,
    late_answers: u64,
    discards_unsent: u64,
    seeds_with_parking: u64,
    seeds_wp_async: u64,
    scans: u64,
    scanned_written: u64,
    digests: u64,
    parks: u64,
    parks_hole: u64,
    parks_refused_shared: u64,
    parks_refused_occupied: u64,
    moves_misreported: u64,
    unparks: u64,
    unparks_copied: u64,
    unshares: u64,
    parked_copied_back: u64,
    discarded_parked: u64,
    discarded_parking: u64,
    zones_held_max: u64,
    resets_deferred: u64,
    seeds_sealed: u64,
    pages_sealed: u64,
    pages_altered: u64,
    pages_failed_open: u64,
    cache_pages_opened: u64,
}

pub struct PagerDstRequest {
    pub seed: u64,
    pub seeds: u64,
    pub steps: u64,
    pub json: bool,
}

/// Runs the seeds; returns whether all passed.
pub fn dst(request: &PagerDstRequest) -> Result<bool> {
    let progress = Progress::new(!request.json);
    let mut table = Table::new(&[
        "seed",
        "steps",
        "reads",
        "swap-ins",
        "lost",
        "corrupted",
        "gc runs",
        "mode",
        "seconds",
        "verdict",
    ]);
    let mut lines = Vec::new();
    let mut failed = Vec::new();
    let mut coverage = PagerCoverage { swap_ins_verified_min: u64::MAX, ..PagerCoverage::default() };
    for seed in request.seed..request.seed + request.seeds {
        progress.set(format!("pager seed {seed} ({} of {})", seed - request.seed + 1, request.seeds));
        let started = Instant::now();
        let report = run(&PagerDstOptions::new(seed, request.steps));
        let seconds = started.elapsed().as_secs_f64();
        if !report.passed() {
            failed.push(seed);
        }
        let self_paging = report.scenario.fault_mode == znswap_dst::pager::PagerFaultMode::SelfPaging;
        coverage.seeds += 1;
        coverage.seeds_self_paging += self_paging as u64;
        coverage.seeds_handler_threads += !self_paging as u64;
        coverage.seeds_with_gc += (report.gc_runs > 0) as u64;
        coverage.seeds_with_lost_pages += (report.lost > 0) as u64;
        coverage.seeds_with_swap_full += (report.core.budget_overruns > 0) as u64;
        coverage.seeds_with_region_churn += (report.coverage.regions_freed > 0) as u64;
        coverage.swap_ins_verified_min = coverage.swap_ins_verified_min.min(report.swap_ins_verified);
        coverage.swap_ins_verified += report.swap_ins_verified;
        coverage.writes_racing_write_outs += report.core.swap_outs_aborted_dirty;
        coverage.evictions_raced += report.core.evictions_raced;
        coverage.swap_cache_dirtied += report.core.swap_cache_dirtied;
        coverage.swap_cache_skipped += report.core.swap_cache_skipped;
        coverage.fault_discards += report.coverage.fault_discards;
        coverage.addresses_reused += report.coverage.addresses_reused;
        coverage.injected_errors += report.coverage.injected_errors;
        coverage.corrupted += report.corrupted;
        let c = &report.coverage;
        coverage.seeds_with_program_discards += (c.program_discards > 0) as u64;
        coverage.program_discards += c.program_discards;
        coverage.discarded_unmapped += c.discarded_unmapped;
        coverage.discarded_resident += c.discarded_resident;
        coverage.discarded_evicting += c.discarded_evicting;
        coverage.discarded_writing += c.discarded_writing;
        coverage.discarded_dropping += c.discarded_dropping;
        coverage.discarded_poisoned += c.discarded_poisoned;
        coverage.discarded_removed += c.discarded_removed;
        coverage.zapped_under_core += c.zapped_under_core;
        coverage.window_accesses += c.window_accesses;
        coverage.zero_fills_landed += c.zero_fills_landed;
        coverage.zero_fills_refused += c.zero_fills_refused;
        coverage.forks += c.forks;
        coverage.budget_changes += c.budget_changes;
        coverage.tenant_budget_changes += c.tenant_budget_changes;
        coverage.tenant_victims += c.tenant_victims;
        coverage.write_limit_changes += c.write_limit_changes;
        coverage.write_throttled_ms += c.write_throttled_ms;
        coverage.swap_limit_changes += c.swap_limit_changes;
        coverage.swap_limit_overruns += c.swap_limit_overruns;
        coverage.child_reads_slot += c.child_reads_slot;
        coverage.child_reads_zero += c.child_reads_zero;
        coverage.child_reads_shadow += c.child_reads_shadow;
        coverage.served_children += c.served_children;
        coverage.inherited_reads += c.inherited_reads;
        coverage.seeds_with_late_agents += (c.discards_late > 0) as u64;
        coverage.discards_late += c.discards_late;
        coverage.late_answers += c.late_answers;
        coverage.discards_unsent += c.discards_unsent;
        coverage.seeds_with_parking += (c.parks > 0) as u64;
        coverage.seeds_wp_async += report.scenario.wp_async as u64;
        coverage.scans += c.scans;
        coverage.scanned_written += c.scanned_written;
        coverage.digests += c.digests;
        coverage.parks += c.parks;
        coverage.parks_hole += c.parks_hole;
        coverage.parks_refused_shared += c.parks_refused_shared;
        coverage.parks_refused_occupied += c.parks_refused_occupied;
        coverage.moves_misreported += c.moves_misreported;
        coverage.unparks += c.unparks;
        coverage.unparks_copied += c.unparks_copied;
        coverage.unshares += c.unshares;
        coverage.parked_copied_back += c.parked_copied_back;
        coverage.discarded_parked += c.discarded_parked;
        coverage.discarded_parking += c.discarded_parking;
        coverage.program_discards_under_lock += c.program_discards_under_lock;
        coverage.zones_held_max = coverage.zones_held_max.max(report.zones_held_max);
        coverage.resets_deferred += report.resets_deferred;
        coverage.seeds_sealed += report.scenario.seal_pages as u64;
        coverage.pages_sealed += c.pages_sealed;
        coverage.pages_altered += c.pages_altered;
        coverage.pages_failed_open += c.pages_failed_open;
        coverage.cache_pages_opened += c.cache_pages_opened;
        table.row(vec![
            seed.to_string(),
            report.ops.to_string(),
            report.pages_verified.to_string(),
            report.swap_ins_verified.to_string(),
            report.lost.to_string(),
            report.corrupted.to_string(),
            report.gc_runs.to_string(),
            match report.scenario.fault_mode {
                znswap_dst::pager::PagerFaultMode::SelfPaging => "self-paging".to_string(),
                znswap_dst::pager::PagerFaultMode::HandlerThreads(count) => format!("{count} handlers"),
            },
            format!("{seconds:.2}"),
            if report.passed() { "ok".into() } else { "FAILED".into() },
        ]);
        lines.push((report, seconds));
    }
    progress.clear();
    if request.json {
        let seeds: Vec<SeedLine> =
            lines.iter().map(|(report, seconds)| SeedLine { report, seconds: *seconds }).collect();
        #[derive(Serialize)]
        struct Out<'a> {
            seeds: Vec<SeedLine<'a>>,
            coverage: &'a PagerCoverage,
        }
        println!("{}", serde_json::to_string_pretty(&Out { seeds, coverage: &coverage })?);
    } else {
        print!("{}", table.render());
        for (report, _) in &lines {
            for violation in report.violations.iter().take(10) {
                println!("seed {}: {violation}", report.seed);
            }
        }
        let mut summary = Table::new(&["coverage", "value"]);
        let rows = [
            ("seeds self-paging", coverage.seeds_self_paging),
            ("seeds with handler threads", coverage.seeds_handler_threads),
            ("seeds that ran the GC", coverage.seeds_with_gc),
            ("seeds that lost pages (offline zones)", coverage.seeds_with_lost_pages),
            ("seeds with swap full (budget overrun)", coverage.seeds_with_swap_full),
            ("seeds that freed and mapped regions", coverage.seeds_with_region_churn),
            ("swap-ins verified, fewest in a seed", coverage.swap_ins_verified_min),
            ("swap-ins verified in all", coverage.swap_ins_verified),
            ("writes during a write-out (swap-out aborted)", coverage.writes_racing_write_outs),
            ("victims written before their hand-over", coverage.evictions_raced),
            ("swapped-in pages written, slot kept (swap cache)", coverage.swap_cache_dirtied),
            ("swapped-in pages mapped writable, slot dropped", coverage.swap_cache_skipped),
            ("discards by faults waiting for room", coverage.fault_discards),
            ("regions mapped at a freed region's addresses", coverage.addresses_reused),
            ("device errors injected", coverage.injected_errors),
            ("seeds with program discards", coverage.seeds_with_program_discards),
            ("program discards (REMOVE events)", coverage.program_discards),
            ("  pages discarded while unmapped", coverage.discarded_unmapped),
            ("  pages discarded while resident", coverage.discarded_resident),
            ("  pages discarded while evicting", coverage.discarded_evicting),
            ("  pages discarded while being written", coverage.discarded_writing),
            ("  pages discarded while awaiting a discard", coverage.discarded_dropping),
            ("  pages discarded while poisoned", coverage.discarded_poisoned),
            ("  pages discarded while Removed (untouched since)", coverage.discarded_removed),
            ("  pages discarded while parked", coverage.discarded_parked),
            ("    of them before their move was settled", coverage.discarded_parking),
            ("program discards zapped under the state lock", coverage.program_discards_under_lock),
            ("accesses between a discard's event and zap", coverage.window_accesses),
            ("pages zapped from under the pager", coverage.zapped_under_core),
            ("zero fills that landed", coverage.zero_fills_landed),
            ("zero fills that met a mapped page", coverage.zero_fills_refused),
            ("forks", coverage.forks),
            ("budget changes", coverage.budget_changes),
            ("tenant budgets set or lifted", coverage.tenant_budget_changes),
            ("victims from tenants over their budgets", coverage.tenant_victims),
            ("tenant write limits set or lifted", coverage.write_limit_changes),
            ("ms tenants waited for their write limits", coverage.write_throttled_ms),
            ("tenant swap limits set or lifted", coverage.swap_limit_changes),
            ("faults past their budget at their tenant's swap limit", coverage.swap_limit_overruns),
            ("child reads from held slots", coverage.child_reads_slot),
            ("child reads of zero pages", coverage.child_reads_zero),
            ("child reads of parked pages (its shadow)", coverage.child_reads_shadow),
            ("forks whose child the pager served too", coverage.served_children),
            ("pages served children read from their parents' slots", coverage.inherited_reads),
            ("seeds whose agents answered discards late", coverage.seeds_with_late_agents),
            ("  discards answered late (the pager went on)", coverage.discards_late),
            ("  late answers taken by the evictor", coverage.late_answers),
            ("  discards not asked while an answer was owed", coverage.discards_unsent),
            ("seeds that parked pages (inactive list)", coverage.seeds_with_parking),
            ("victims parked (moved to the shadow)", coverage.parks),
            ("seeds with asynchronous write protection", coverage.seeds_wp_async),
            ("  victims' spans scanned for written pages", coverage.scans),
            ("  pages those scans found written", coverage.scanned_written),
            ("  digests of parked swap-cached pages", coverage.digests),
            ("  moves refused: shared with a fork's child", coverage.parks_refused_shared),
            ("  moves refused: shadow page not yet discarded", coverage.parks_refused_occupied),
            ("moves done but failed (Linux 6.18), taken as done", coverage.moves_misreported),
            ("  moves that found the page zapped (program discard)", coverage.parks_hole),
            ("parked pages touched, moved back", coverage.unparks),
            ("  copied back instead: shared with a child", coverage.unparks_copied),
            ("pages shared with a child made the parent's (unshare)", coverage.unshares),
            ("copied back (from the shadow, or in a write-out)", coverage.parked_copied_back),
            ("zones held at once, most in a seed", coverage.zones_held_max),
            ("zone resets deferred by a hold", coverage.resets_deferred),
            ("seeds that sealed (encrypted) their pages", coverage.seeds_sealed),
            ("pages sealed on their way to the device", coverage.pages_sealed),
            ("sealed pages altered on the device", coverage.pages_altered),
            ("  reads that failed to open (reported lost)", coverage.pages_failed_open),
            ("sealed pages read ahead, opened when faulted", coverage.cache_pages_opened),
            ("corrupted reads", coverage.corrupted),
        ];
        for (name, value) in rows {
            summary.row(vec![name.to_string(), value.to_string()]);
        }
        print!("{}", summary.render());
        println!("dst --pager: {} passed, {} failed", request.seeds - failed.len() as u64, failed.len());
    }
    for seed in &failed {
        eprintln!(
            "dst --pager: seed {seed} FAILED; replay with `znswap dst --pager --seed {seed} --ops {}`",
            request.steps
        );
    }
    Ok(failed.is_empty())
}
