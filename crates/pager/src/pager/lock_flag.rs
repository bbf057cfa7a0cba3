//! Whether the calling thread holds the pager's state lock. No code touches region
//! memory while holding it: in self-paging mode the SIGBUS handler takes the lock, so
//! such a touch would deadlock. The flag is set and cleared by the state lock's guard
//! (`shared.rs`), asserted clear where the pager reads region memory or runs a device
//! command, and checked by the SIGBUS handler, which aborts with a message instead of
//! deadlocking.

use std::cell::Cell;

thread_local! {
    static HOLDS_STATE_LOCK: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread holds the pager's state lock.
pub(crate) fn holds_state_lock() -> bool {
    HOLDS_STATE_LOCK.with(Cell::get)
}

/// The calling thread takes (`true`) or lets go of (`false`) the state lock.
pub(super) fn set(held: bool) {
    HOLDS_STATE_LOCK.with(|flag| flag.set(held));
}
