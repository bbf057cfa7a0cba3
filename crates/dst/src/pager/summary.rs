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
    pub swap_ins_verified: u64,
    pub writes_racing_write_outs: u64,
    pub swap_cache_dirtied: u64,
    pub swap_cache_skipped: u64,
    pub evictions_raced: u64,
    pub fault_discards: u64,
    pub addresses_reused: u64,
    pub injected_errors: u64,
    pub corrupted: u64,
    pub seeds_with_program_discards: u64,
    pub program_discards: u64,
    pub program_discards_under_lock: u64,
    pub discarded_unmapped: u64,
    pub discarded_resident: u64,
    pub discarded_evicting: u64,
    pub discarded_writing: u64,
    pub discarded_dropping: u64,
    pub discarded_poisoned: u64,
    pub discarded_removed: u64,
    pub zapped_under_core: u64,
    pub window_accesses: u64,
    pub zero_fills_landed: u64,
    pub zero_fills_refused: u64,
    pub forks: u64,
    pub budget_changes: u64,
    pub tenant_budget_changes: u64,
    pub tenant_victims: u64,
    pub write_limit_changes: u64,
    pub write_throttled_ms: u64,
    pub faults_aside: u64,
    pub aside_resumed: u64,
    pub aside_no_spare: u64,
    pub swap_limit_changes: u64,
    pub swap_limit_overruns: u64,
    pub child_reads_slot: u64,
    pub child_reads_zero: u64,
    pub child_reads_shadow: u64,
    pub served_children: u64,
    pub inherited_reads: u64,
    pub seeds_with_late_agents: u64,
    pub discards_late: u64,
    pub late_answers: u64,
    pub discards_unsent: u64,
    pub seeds_with_parking: u64,
    pub seeds_wp_async: u64,
    pub scans: u64,
    pub scanned_written: u64,
    pub digests: u64,
    pub parks: u64,
    pub parks_hole: u64,
    pub parks_refused_shared: u64,
    pub parks_refused_occupied: u64,
    pub moves_misreported: u64,
    pub unparks: u64,
    pub unparks_copied: u64,
    pub unshares: u64,
    pub parked_copied_back: u64,
    pub discarded_parked: u64,
    pub discarded_parking: u64,
    pub zones_held_max: u64,
    pub resets_deferred: u64,
    pub seeds_sealed: u64,
    pub pages_sealed: u64,
    pub pages_altered: u64,
    pub pages_failed_open: u64,
    pub cache_pages_opened: u64,
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
        self.swap_ins_verified += report.swap_ins_verified;
        self.writes_racing_write_outs += report.core.swap_outs_aborted_dirty;
        self.evictions_raced += report.core.evictions_raced;
        self.swap_cache_dirtied += report.core.swap_cache_dirtied;
        self.swap_cache_skipped += report.core.swap_cache_skipped;
        self.corrupted += report.corrupted;
        self.zones_held_max = self.zones_held_max.max(report.zones_held_max);
        self.resets_deferred += report.resets_deferred;
        self.seeds_wp_async += report.scenario.wp_async as u64;
        self.seeds_sealed += report.scenario.encrypt as u64;
        self.add_counters(&report.coverage);
    }

    /// Adds a seed's coverage counters.
    fn add_counters(&mut self, c: &Coverage) {
        self.fault_discards += c.fault_discards;
        self.addresses_reused += c.addresses_reused;
        self.injected_errors += c.injected_errors;
        self.seeds_with_program_discards += (c.program_discards > 0) as u64;
        self.program_discards += c.program_discards;
        self.program_discards_under_lock += c.program_discards_under_lock;
        self.discarded_unmapped += c.discarded_unmapped;
        self.discarded_resident += c.discarded_resident;
        self.discarded_evicting += c.discarded_evicting;
        self.discarded_writing += c.discarded_writing;
        self.discarded_dropping += c.discarded_dropping;
        self.discarded_poisoned += c.discarded_poisoned;
        self.discarded_removed += c.discarded_removed;
        self.discarded_parked += c.discarded_parked;
        self.discarded_parking += c.discarded_parking;
        self.zapped_under_core += c.zapped_under_core;
        self.window_accesses += c.window_accesses;
        self.zero_fills_landed += c.zero_fills_landed;
        self.zero_fills_refused += c.zero_fills_refused;
        self.forks += c.forks;
        self.budget_changes += c.budget_changes;
        self.tenant_budget_changes += c.tenant_budget_changes;
        self.tenant_victims += c.tenant_victims;
        self.write_limit_changes += c.write_limit_changes;
        self.write_throttled_ms += c.write_throttled_ms;
        self.faults_aside += c.faults_aside;
        self.aside_resumed += c.aside_resumed;
        self.aside_no_spare += c.aside_no_spare;
        self.swap_limit_changes += c.swap_limit_changes;
        self.swap_limit_overruns += c.swap_limit_overruns;
        self.child_reads_slot += c.child_reads_slot;
        self.child_reads_zero += c.child_reads_zero;
        self.child_reads_shadow += c.child_reads_shadow;
        self.served_children += c.served_children;
        self.inherited_reads += c.inherited_reads;
        self.seeds_with_late_agents += (c.discards_late > 0) as u64;
        self.discards_late += c.discards_late;
        self.late_answers += c.late_answers;
        self.discards_unsent += c.discards_unsent;
        self.seeds_with_parking += (c.parks > 0) as u64;
        self.scans += c.scans;
        self.scanned_written += c.scanned_written;
        self.digests += c.digests;
        self.parks += c.parks;
        self.parks_hole += c.parks_hole;
        self.parks_refused_shared += c.parks_refused_shared;
        self.parks_refused_occupied += c.parks_refused_occupied;
        self.moves_misreported += c.moves_misreported;
        self.unparks += c.unparks;
        self.unparks_copied += c.unparks_copied;
        self.unshares += c.unshares;
        self.parked_copied_back += c.parked_copied_back;
        self.pages_sealed += c.pages_sealed;
        self.pages_altered += c.pages_altered;
        self.pages_failed_open += c.pages_failed_open;
        self.cache_pages_opened += c.cache_pages_opened;
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
            figure!(self, swap_ins_verified, "swap-ins verified in all"),
            figure!(self, writes_racing_write_outs, "writes during a write-out (swap-out aborted)"),
            figure!(self, evictions_raced, "victims written before their hand-over"),
            figure!(self, swap_cache_dirtied, "swapped-in pages written, slot kept (swap cache)"),
            figure!(self, swap_cache_skipped, "swapped-in pages mapped writable, slot dropped"),
            figure!(self, fault_discards, "discards by faults waiting for room"),
            figure!(self, addresses_reused, "regions mapped at a freed region's addresses"),
            figure!(self, injected_errors, "device errors injected"),
            figure!(self, seeds_with_program_discards, "seeds with program discards"),
            figure!(self, program_discards, "program discards (REMOVE events)"),
            figure!(self, discarded_unmapped, "  pages discarded while unmapped"),
            figure!(self, discarded_resident, "  pages discarded while resident"),
            figure!(self, discarded_evicting, "  pages discarded while evicting"),
            figure!(self, discarded_writing, "  pages discarded while being written"),
            figure!(self, discarded_dropping, "  pages discarded while awaiting a discard"),
            figure!(self, discarded_poisoned, "  pages discarded while poisoned"),
            figure!(self, discarded_removed, "  pages discarded while Removed (untouched since)"),
            figure!(self, discarded_parked, "  pages discarded while parked"),
            figure!(self, discarded_parking, "    of them before their move was settled"),
            figure!(self, program_discards_under_lock, "program discards zapped under the state lock"),
            figure!(self, window_accesses, "accesses between a discard's event and zap"),
            figure!(self, zapped_under_core, "pages zapped from under the pager"),
            figure!(self, zero_fills_landed, "zero fills that landed"),
            figure!(self, zero_fills_refused, "zero fills that met a mapped page"),
            figure!(self, forks, "forks"),
            figure!(self, budget_changes, "budget changes"),
            figure!(self, tenant_budget_changes, "tenant budgets set or lifted"),
            figure!(self, tenant_victims, "victims from tenants over their budgets"),
            figure!(self, write_limit_changes, "tenant write limits set or lifted"),
            figure!(self, write_throttled_ms, "ms tenants waited for their write limits"),
            figure!(self, faults_aside, "faults set aside while held by a write limit"),
            figure!(self, aside_resumed, "  faults aside stepped again"),
            figure!(self, aside_no_spare, "  faults waited in (no spare slot)"),
            figure!(self, swap_limit_changes, "tenant swap limits set or lifted"),
            figure!(self, swap_limit_overruns, "faults past their budget at their tenant's swap limit"),
            figure!(self, child_reads_slot, "child reads from held slots"),
            figure!(self, child_reads_zero, "child reads of zero pages"),
            figure!(self, child_reads_shadow, "child reads of parked pages (its shadow)"),
            figure!(self, served_children, "forks whose child the pager served too"),
            figure!(self, inherited_reads, "pages served children read from their parents' slots"),
            figure!(self, seeds_with_late_agents, "seeds whose agents answered discards late"),
            figure!(self, discards_late, "  discards answered late (the pager went on)"),
            figure!(self, late_answers, "  late answers taken by the evictor"),
            figure!(self, discards_unsent, "  discards not asked while an answer was owed"),
            figure!(self, seeds_with_parking, "seeds that parked pages (inactive list)"),
            figure!(self, parks, "victims parked (moved to the shadow)"),
            figure!(self, seeds_wp_async, "seeds with asynchronous write protection"),
            figure!(self, scans, "  victims' spans scanned for written pages"),
            figure!(self, scanned_written, "  pages those scans found written"),
            figure!(self, digests, "  digests of parked swap-cached pages"),
            figure!(self, parks_refused_shared, "  moves refused: shared with a fork's child"),
            figure!(self, parks_refused_occupied, "  moves refused: shadow page not yet discarded"),
            figure!(self, moves_misreported, "moves done but failed (Linux 6.18), taken as done"),
            figure!(self, parks_hole, "  moves that found the page zapped (program discard)"),
            figure!(self, unparks, "parked pages touched, moved back"),
            figure!(self, unparks_copied, "  copied back instead: shared with a child"),
            figure!(self, unshares, "pages shared with a child made the parent's (unshare)"),
            figure!(self, parked_copied_back, "copied back (from the shadow, or in a write-out)"),
            figure!(self, zones_held_max, "zones held at once, most in a seed"),
            figure!(self, resets_deferred, "zone resets deferred by a hold"),
            figure!(self, seeds_sealed, "seeds that sealed (encrypted) their pages"),
            figure!(self, pages_sealed, "pages sealed on their way to the device"),
            figure!(self, pages_altered, "sealed pages altered on the device"),
            figure!(self, pages_failed_open, "  reads that failed to open (reported lost)"),
            figure!(self, cache_pages_opened, "sealed pages read ahead, opened when faulted"),
            figure!(self, corrupted, "corrupted reads"),
        ];
        Figures { figures }
    }
}
