//! The coverage of a run of pager seeds ([`PagerCoverage`]): each counter summed (or the
//! seeds counted, the fewest or most taken) over the seeds' reports, and the same as
//! figures ([`PagerCoverage::figures`]) that `crate::coverage::Floors` check, as the
//! engine DST's are (`pager-coverage-floors.json` beside this crate's manifest, checked
//! by CI).
//!
//! A seed that passes proves little if it never reached the code in question: a floor
//! turns a drop in what the seeds reach (a scenario change that stops forking, parking
//! no longer refused) into a failure.

use serde::Serialize;

use super::coverage::Coverage;
use super::report::PagerDstReport;
use super::scenario::PagerFaultMode;
use crate::coverage::{Coverage as Figures, Figure, Value};

/// What a run of seeds exercised, over all seeds. Serializes as one JSON object, a
/// counter's name to its value; its figures carry the same names.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PagerCoverage {
    pub seeds: u64,
    pub seeds_self_paging: u64,
    pub seeds_handler_threads: u64,
    pub seeds_with_gc: u64,
    pub seeds_with_lost_pages: u64,
    pub seeds_with_swap_full: u64,
    pub seeds_with_region_churn: u64,
    /// The fewest of a seed (0 before any seed).
    pub swap_ins_verified_min: u64,
    pub writes_racing_write_outs: u64,
    pub swap_cache_dirtied: u64,
    pub swap_cache_skipped: u64,
    /// Pages back within the budget's refault distance (given passes of the hand), and
    /// the passes the hand spent (`CoreConfig::refault_passes`).
    pub refaults_short: u64,
    pub refault_passes_spent: u64,
    /// Referenced pages reference sampling passed by until their turn, and the seeds
    /// whose sampling period grew past 1 (`CoreConfig::sampling_period_max`).
    pub sampling_deferred: u64,
    pub seeds_sampling_period_grew: u64,
    pub evictions_raced: u64,
    pub corrupted: u64,
    pub seeds_with_program_discards: u64,
    pub seeds_with_late_agents: u64,
    pub seeds_with_parking: u64,
    pub seeds_wp_async: u64,
    pub zones_held_max: u64,
    pub resets_deferred: u64,
    pub seeds_sealed: u64,
    /// Every seed's counters, summed.
    #[serde(flatten)]
    pub counters: Coverage,
}

/// A figure named after its counter (the JSON key and the floors file's key).
macro_rules! figure {
    ($coverage:expr, $counter:ident, $what:expr) => {
        Figure { name: stringify!($counter), what: $what, value: Value::Count($coverage.$counter) }
    };
}

impl PagerCoverage {
    pub fn of(reports: &[PagerDstReport]) -> PagerCoverage {
        let mut coverage = PagerCoverage::default();
        for report in reports {
            coverage.add(report);
        }
        coverage
    }

    /// Adds a seed's report.
    pub fn add(&mut self, report: &PagerDstReport) {
        let self_paging = report.scenario.fault_mode == PagerFaultMode::SelfPaging;
        self.seeds += 1;
        self.seeds_self_paging += self_paging as u64;
        self.seeds_handler_threads += !self_paging as u64;
        self.seeds_with_gc += (report.gc_runs > 0) as u64;
        self.seeds_with_lost_pages += (report.lost > 0) as u64;
        self.seeds_with_swap_full += (report.core.budget_overruns > 0) as u64;
        self.seeds_with_region_churn += (report.coverage.regions_freed > 0) as u64;
        self.swap_ins_verified_min = match self.seeds {
            1 => report.swap_ins_verified,
            _ => self.swap_ins_verified_min.min(report.swap_ins_verified),
        };
        self.writes_racing_write_outs += report.core.swap_outs_aborted_dirty;
        self.evictions_raced += report.core.evictions_raced;
        self.swap_cache_dirtied += report.core.swap_cache_dirtied;
        self.swap_cache_skipped += report.core.swap_cache_skipped;
        self.refaults_short += report.core.refaults_short;
        self.refault_passes_spent += report.core.refault_passes_spent;
        self.sampling_deferred += report.core.sampling_deferred;
        self.seeds_sampling_period_grew += (report.core.sampling_deferred > 0) as u64;
        self.corrupted += report.corrupted;
        self.zones_held_max = self.zones_held_max.max(report.zones_held_max);
        self.resets_deferred += report.resets_deferred;
        self.seeds_wp_async += report.scenario.wp_async as u64;
        self.seeds_sealed += report.scenario.encrypt as u64;
        self.add_counters(&report.coverage);
    }

    /// Adds a seed's coverage counters.
    fn add_counters(&mut self, c: &Coverage) {
        self.counters.add(c);
        self.seeds_with_program_discards += (c.program_discards > 0) as u64;
        self.seeds_with_late_agents += (c.discards_late > 0) as u64;
        self.seeds_with_parking += (c.parks > 0) as u64;
    }

    /// The counters as figures, in the coverage table's order (the seeds run not among
    /// them), each named after its counter and described for the table (indented: a
    /// part of the row above).
    pub fn figures(&self) -> Figures {
        let figures = vec![
            figure!(self, seeds_self_paging, "seeds self-paging"),
            figure!(self, seeds_handler_threads, "seeds with handler threads"),
            figure!(self, seeds_with_gc, "seeds that ran the GC"),
            figure!(self, seeds_with_lost_pages, "seeds that lost pages (offline zones)"),
            figure!(self, seeds_with_swap_full, "seeds with swap full (budget overrun)"),
            figure!(self, seeds_with_region_churn, "seeds that freed and mapped regions"),
            figure!(self, swap_ins_verified_min, "swap-ins verified, fewest in a seed"),
            figure!(self.counters, swap_ins_verified, "swap-ins verified in all"),
            figure!(self, writes_racing_write_outs, "writes during a write-out (swap-out aborted)"),
            figure!(self, evictions_raced, "victims written before their hand-over"),
            figure!(self, swap_cache_dirtied, "swapped-in pages written, slot kept (swap cache)"),
            figure!(self, swap_cache_skipped, "swapped-in pages mapped writable, slot dropped"),
            figure!(self, refaults_short, "pages back soon after eviction (refault passes)"),
            figure!(self, refault_passes_spent, "  passes of the hand they spent"),
            figure!(self, sampling_deferred, "referenced pages passed by until sampling's turn"),
            figure!(self, seeds_sampling_period_grew, "  seeds whose sampling period grew"),
            figure!(self.counters, fault_discards, "discards by faults waiting for room"),
            figure!(self.counters, addresses_reused, "regions mapped at a freed region's addresses"),
            figure!(self.counters, injected_errors, "device errors injected"),
            figure!(self, seeds_with_program_discards, "seeds with program discards"),
            figure!(self.counters, program_discards, "program discards (REMOVE events)"),
            figure!(self.counters, discarded_unmapped, "  pages discarded while unmapped"),
            figure!(self.counters, discarded_resident, "  pages discarded while resident"),
            figure!(self.counters, discarded_evicting, "  pages discarded while evicting"),
            figure!(self.counters, discarded_writing, "  pages discarded while being written"),
            figure!(self.counters, discarded_dropping, "  pages discarded while awaiting a discard"),
            figure!(self.counters, discarded_poisoned, "  pages discarded while poisoned"),
            figure!(self.counters, discarded_removed, "  pages discarded while Removed (untouched since)"),
            figure!(self.counters, discarded_parked, "  pages discarded while parked"),
            figure!(self.counters, discarded_parking, "    of them before their move was settled"),
            figure!(self.counters, program_discards_under_lock, "program discards zapped under the state lock"),
            figure!(self.counters, window_accesses, "accesses between a discard's event and zap"),
            figure!(self.counters, zapped_under_core, "pages zapped from under the pager"),
            figure!(self.counters, zero_fills_landed, "zero fills that landed"),
            figure!(self.counters, zero_fills_refused, "zero fills that met a mapped page"),
            figure!(self.counters, forks, "forks"),
            figure!(self.counters, budget_changes, "budget changes"),
            figure!(self.counters, tenant_budget_changes, "tenant budgets set or lifted"),
            figure!(self.counters, tenant_victims, "victims from tenants over their budgets"),
            figure!(self.counters, write_limit_changes, "tenant write limits set or lifted"),
            figure!(self.counters, write_throttled_ms, "ms tenants waited for their write limits"),
            figure!(self.counters, faults_aside, "faults set aside while held by a write limit"),
            figure!(self.counters, aside_resumed, "  faults aside stepped again"),
            figure!(self.counters, aside_no_spare, "  faults waited in (no spare slot)"),
            figure!(self.counters, swap_limit_changes, "tenant swap limits set or lifted"),
            figure!(self.counters, swap_limit_overruns, "faults past their budget at their tenant's swap limit"),
            figure!(self.counters, child_reads_slot, "child reads from held slots"),
            figure!(self.counters, child_reads_zero, "child reads of zero pages"),
            figure!(self.counters, child_reads_shadow, "child reads of parked pages (its shadow)"),
            figure!(self.counters, served_children, "forks whose child the pager served too"),
            figure!(self.counters, inherited_reads, "pages served children read from their parents' slots"),
            figure!(self, seeds_with_late_agents, "seeds whose agents answered discards late"),
            figure!(self.counters, discards_late, "  discards answered late (the pager went on)"),
            figure!(self.counters, late_answers, "  late answers taken by the evictor"),
            figure!(self.counters, discards_unsent, "  discards not asked while an answer was owed"),
            figure!(self, seeds_with_parking, "seeds that parked pages (inactive list)"),
            figure!(self.counters, parks, "victims parked (moved to the shadow)"),
            figure!(self, seeds_wp_async, "seeds with asynchronous write protection"),
            figure!(self.counters, scans, "  victims' spans scanned for written pages"),
            figure!(self.counters, scanned_written, "  pages those scans found written"),
            figure!(self.counters, digests, "  digests of parked swap-cached pages"),
            figure!(self.counters, parks_refused_shared, "  moves refused: shared with a fork's child"),
            figure!(self.counters, parks_refused_occupied, "  moves refused: shadow page not yet discarded"),
            figure!(self.counters, moves_misreported, "moves done but failed (Linux 6.18), taken as done"),
            figure!(self.counters, parks_hole, "  moves that found the page zapped (program discard)"),
            figure!(self.counters, unparks, "parked pages touched, moved back"),
            figure!(self.counters, unparks_copied, "  copied back instead: shared with a child"),
            figure!(self.counters, unshares, "pages shared with a child made the parent's (unshare)"),
            figure!(self.counters, parked_copied_back, "copied back (from the shadow, or in a write-out)"),
            figure!(self, zones_held_max, "zones held at once, most in a seed"),
            figure!(self, resets_deferred, "zone resets deferred by a hold"),
            figure!(self, seeds_sealed, "seeds that sealed (encrypted) their pages"),
            figure!(self.counters, pages_sealed, "pages sealed on their way to the device"),
            figure!(self.counters, pages_altered, "sealed pages altered on the device"),
            figure!(self.counters, pages_failed_open, "  reads that failed to open (reported lost)"),
            figure!(self.counters, cache_pages_opened, "sealed pages read ahead, opened when faulted"),
            figure!(self, corrupted, "corrupted reads"),
        ];
        Figures { figures }
    }
}
