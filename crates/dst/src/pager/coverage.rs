//! Counters of what one seed's run exercised ([`Coverage`], in its report).

use serde::Serialize;

/// Counters of what the run exercised.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Coverage {
    pub accesses: u64,
    pub reads_verified: u64,
    /// Reads of pages installed from a device read and not written since.
    pub swap_ins_verified: u64,
    pub writes: u64,
    pub faults_missing: u64,
    pub faults_write_protect: u64,
    pub fault_pauses: u64,
    pub room_waits: u64,
    /// Discards done by faults waiting for room (direct reclaim).
    pub fault_discards: u64,
    pub evictor_discards: u64,
    pub rounds: u64,
    pub regions_freed: u64,
    /// New regions placed at a freed region's addresses.
    pub addresses_reused: u64,
    /// Region removals refused for lack of an owner id (the engine still names the old).
    pub regions_refused: u64,
    pub zones_taken_offline: u32,
    pub injected_errors: u64,
    pub lost_observed: u64,
    /// Appends that read a victim while an application write to it was pending.
    pub appends: u64,
    pub stale_events: u64,
    /// Episodes of full swap said to the user.
    pub swap_full_notices: u64,
    /// The program's discards (REMOVE events read), and their pages by pager state.
    pub program_discards: u64,
    /// Of them, through the pager with the zap under the state lock.
    pub program_discards_under_lock: u64,
    pub discarded_unmapped: u64,
    pub discarded_resident: u64,
    pub discarded_evicting: u64,
    pub discarded_writing: u64,
    pub discarded_dropping: u64,
    pub discarded_poisoned: u64,
    pub discarded_removed: u64,
    /// Pages the zap took from under the pager (mapped since the event).
    pub zapped_under_core: u64,
    /// Accesses between a discard's event and its zap to pages of its range.
    pub window_accesses: u64,
    /// `FaultStep::ZeroFill`s that landed, and that met something mapped.
    pub zero_fills_landed: u64,
    pub zero_fills_refused: u64,
    pub forks: u64,
    /// Budget changes while the run went on.
    pub budget_changes: u64,
    /// Tenants' own budgets set or lifted (seeds with two tenants), and victims the
    /// evictor picked from tenants over theirs.
    pub tenant_budget_changes: u64,
    pub tenant_victims: u64,
    /// Tenants' write limits set or lifted, and how long tenants' swap-outs waited for
    /// them (simulated milliseconds, summed).
    pub write_limit_changes: u64,
    pub write_throttled_ms: u64,
    /// Faults a handler set aside while their tenant's write limit held them
    /// (`Next::Aside`), faults aside a handler stepped again, and faults that found no
    /// spare slot and were waited in.
    pub faults_aside: u64,
    pub aside_resumed: u64,
    pub aside_no_spare: u64,
    /// Tenants' swap limits set or lifted, and faults that went past their tenant's
    /// budget at its swap limit.
    pub swap_limit_changes: u64,
    pub swap_limit_overruns: u64,
    /// The child's reads of its snapshot: from held slots, zero pages, lost pages.
    pub child_reads_slot: u64,
    pub child_reads_zero: u64,
    pub child_reads_lost: u64,
    /// Forks whose child the pager served (a region of its own inheriting the
    /// parent's pages), and the pages such children read from their parents' slots.
    pub served_children: u64,
    pub inherited_reads: u64,
    /// Sealed pages: written, altered on the device, failed to open when read.
    pub pages_sealed: u64,
    pub pages_altered: u64,
    pub pages_failed_open: u64,
    /// Sealed pages read ahead, opened when a fault wanted them.
    pub cache_pages_opened: u64,
    pub child_reads_shadow: u64,
    /// Victims moved to their shadow pages; moves that found nothing mapped (the
    /// program's discard zapped the page meanwhile); moves refused: shared with a fork's
    /// child, the shadow page still mapped.
    pub parks: u64,
    pub parks_hole: u64,
    pub parks_refused_shared: u64,
    /// Asynchronous write protection: scans of victims' spans, and pages they found
    /// written; digests of parked pages taken.
    pub scans: u64,
    /// Pages shared with a fork's child made the parent's (`Action::Unshare`).
    pub unshares: u64,
    /// Discards a served process's agent answered late, those answers taken, and
    /// discards not asked while an answer was owed (`DropDelay`).
    pub discards_late: u64,
    pub late_answers: u64,
    pub discards_unsent: u64,
    pub scanned_written: u64,
    pub digests: u64,
    pub parks_refused_occupied: u64,
    /// Moves to or from a shadow page done but failed all the same (Linux 6.18), which
    /// the shells' rules took as done.
    pub moves_misreported: u64,
    /// Parked pages moved back by a touch (of them, copied: shared with a child), and
    /// copied back during their swap-out.
    pub unparks: u64,
    pub unparks_copied: u64,
    pub parked_copied_back: u64,
    pub discarded_parked: u64,
    /// Of them, pages whose move was still to be settled (`ParkingRemoved`).
    pub discarded_parking: u64,
}
