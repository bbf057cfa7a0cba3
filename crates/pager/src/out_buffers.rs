//! Swap-out buffers, allocated once: the page images the evictor snapshots and the
//! engine's appends carry to the device.
//!
//! The bytes live outside the pager's state lock, so the two copies of every swapped-out
//! page (victim → buffer, buffers → the append's contiguous write) happen without
//! holding it, and faults never wait behind them. The free list stays under the lock.
//!
//! Ownership of a buffer handle passes along one path, and only its owner touches the
//! bytes:
//! 1. the free list (`State::out_free`, under the state lock);
//! 2. the evictor, from taking the handle to handing it to `Engine::swap_out` (or back to
//!    the free list): it writes the snapshot;
//! 3. the engine, until it reports the swap-out done (`Event::SwapOutDone`, emitted only
//!    when the append carrying the page completed or failed, or at once for a clean
//!    swap-cache hit that carries no page): the I/O pump reads the bytes for the append
//!    between `poll_io` and `append_done`.
//!
//! After `SwapOutDone` the handle goes back to the free list (step 1).

use std::cell::UnsafeCell;

use crate::pager::PAGE_BYTES;

pub(crate) struct OutBuffers {
    pages: Box<[UnsafeCell<[u8; PAGE_BYTES]>]>,
}

// SAFETY: every access goes through `page` / `page_mut`, whose callers own the handle
// (module comment), so no two threads touch one buffer at once.
unsafe impl Sync for OutBuffers {}
unsafe impl Send for OutBuffers {}

impl OutBuffers {
    pub(crate) fn new(count: usize) -> OutBuffers {
        OutBuffers { pages: (0..count).map(|_| UnsafeCell::new([0u8; PAGE_BYTES])).collect() }
    }

    /// The bytes of buffer `handle`.
    ///
    /// # Safety
    /// The caller owns `handle` (module comment) and nobody writes it meanwhile.
    pub(crate) unsafe fn page(&self, handle: u64) -> &[u8; PAGE_BYTES] {
        // SAFETY: per the contract, no writer exists while this borrow lives.
        unsafe { &*self.pages[handle as usize].get() }
    }

    /// The bytes of buffer `handle`, to fill.
    ///
    /// # Safety
    /// The caller owns `handle` (module comment) and nobody else reads or writes it
    /// while the borrow lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn page_mut(&self, handle: u64) -> &mut [u8; PAGE_BYTES] {
        // SAFETY: per the contract, this is the only borrow of the buffer.
        unsafe { &mut *self.pages[handle as usize].get() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_distinct_pages() {
        let buffers = OutBuffers::new(3);
        // SAFETY: this test owns every handle.
        unsafe {
            buffers.page_mut(0).fill(1);
            buffers.page_mut(2).fill(3);
            assert!(buffers.page(0).iter().all(|&b| b == 1));
            assert!(buffers.page(1).iter().all(|&b| b == 0));
            assert!(buffers.page(2).iter().all(|&b| b == 3));
        }
    }
}
