//! Counters of what one seed's run exercised ([`Coverage`], in its report).

use serde::Serialize;

/// `Coverage` with one line per counter, and `add`, which sums every one of them (a run
/// of seeds sums its seeds' counters: `summary.rs`).
macro_rules! coverage {
    ($($(#[$doc:meta])* $name:ident: $kind:ty,)*) => {
        /// Counters of what the run exercised.
        #[derive(Clone, Debug, Default, PartialEq, Serialize)]
        pub struct Coverage {
            $($(#[$doc])* pub $name: $kind,)*
        }

        impl Coverage {
            /// Adds `other`'s counters to these.
            pub fn add(&mut self, other: &Coverage) {
                $(self.$name += other.$name;)*
            }
        }
    };
}

coverage! {
    accesses: u64,
    reads_verified: u64,
    /// Reads of pages installed from a device read and not written since.
    swap_ins_verified: u64,
    writes: u64,
    faults_missing: u64,
    faults_write_protect: u64,
    fault_pauses: u64,
    room_waits: u64,
    /// Discards done by faults waiting for room (direct reclaim).
    fault_discards: u64,
    evictor_discards: u64,
    rounds: u64,
    regions_freed: u64,
    /// New regions placed at a freed region's addresses.
    addresses_reused: u64,
    /// Region removals refused for lack of an owner id (the engine still names the old).
    regions_refused: u64,
    zones_taken_offline: u32,
    injected_errors: u64,
    lost_observed: u64,
    /// Appends that read a victim while an application write to it was pending.
    appends: u64,
    stale_events: u64,
    /// Episodes of full swap said to the user.
    swap_full_notices: u64,
    /// The program's discards (REMOVE events read), and their pages by pager state.
    program_discards: u64,
    /// Of them, through the pager with the zap under the state lock.
    program_discards_under_lock: u64,
    discarded_unmapped: u64,
    discarded_resident: u64,
    discarded_evicting: u64,
    discarded_writing: u64,
    discarded_dropping: u64,
    discarded_poisoned: u64,
    discarded_removed: u64,
    /// Pages the zap took from under the pager (mapped since the event).
    zapped_under_core: u64,
    /// Accesses between a discard's event and its zap to pages of its range.
    window_accesses: u64,
    /// `FaultStep::ZeroFill`s that landed, and that met something mapped.
    zero_fills_landed: u64,
    zero_fills_refused: u64,
    forks: u64,
    /// Budget changes while the run went on.
    budget_changes: u64,
    /// Tenants' own budgets set or lifted (seeds with two tenants), and victims the
    /// evictor picked from tenants over theirs.
    tenant_budget_changes: u64,
    tenant_victims: u64,
    /// Tenants' write limits set or lifted, and how long tenants' swap-outs waited for
    /// them (simulated milliseconds, summed).
    write_limit_changes: u64,
    write_throttled_ms: u64,
    /// Faults a handler set aside while their tenant's write limit held them
    /// (`Next::Aside`), faults aside a handler stepped again, and faults that found no
    /// spare slot and were waited in.
    faults_aside: u64,
    aside_resumed: u64,
    aside_no_spare: u64,
    /// Tenants' swap limits set or lifted, and faults that went past their tenant's
    /// budget at its swap limit.
    swap_limit_changes: u64,
    swap_limit_overruns: u64,
    /// The child's reads of its snapshot: from held slots, zero pages, lost pages.
    child_reads_slot: u64,
    child_reads_zero: u64,
    child_reads_lost: u64,
    /// Forks whose child the pager served (a region of its own inheriting the
    /// parent's pages), and the pages such children read from their parents' slots.
    served_children: u64,
    inherited_reads: u64,
    /// Sealed pages: written, altered on the device, failed to open when read.
    pages_sealed: u64,
    pages_altered: u64,
    pages_failed_open: u64,
    /// Sealed pages read ahead, opened when a fault wanted them.
    cache_pages_opened: u64,
    child_reads_shadow: u64,
    /// Victims moved to their shadow pages; moves that found nothing mapped (the
    /// program's discard zapped the page meanwhile); moves refused: shared with a fork's
    /// child, the shadow page still mapped.
    parks: u64,
    parks_hole: u64,
    parks_refused_shared: u64,
    /// Asynchronous write protection: scans of victims' spans, and pages they found
    /// written; digests of parked pages taken.
    scans: u64,
    /// Pages shared with a fork's child made the parent's (`Action::Unshare`).
    unshares: u64,
    /// Discards a served process's agent answered late, those answers taken, and
    /// discards not asked while an answer was owed (`DropDelay`).
    discards_late: u64,
    late_answers: u64,
    discards_unsent: u64,
    scanned_written: u64,
    digests: u64,
    parks_refused_occupied: u64,
    /// Moves to or from a shadow page done but failed all the same (Linux 6.18), which
    /// the shells' rules took as done.
    moves_misreported: u64,
    /// Parked pages moved back by a touch (of them, copied: shared with a child), and
    /// copied back during their swap-out.
    unparks: u64,
    unparks_copied: u64,
    parked_copied_back: u64,
    discarded_parked: u64,
    /// Of them, pages whose move was still to be settled (`ParkingRemoved`).
    discarded_parking: u64,
}
