//! Page buffers allocated once, page-aligned (so O_DIRECT I/O needs no bounce copy),
//! whose bytes live outside the pager's state lock: the GC move buffer, and the
//! read-ahead cache. Device reads
//! fill it and appends write from it (scatter-gather, no copy) without holding the
//! lock, so faults never wait behind them. (Swap-out appends need no buffer: they read
//! the victim pages in place, see `Shared::pump`.)
//!
//! Ownership decides who may touch a buffer page; only its owner does. **GC move
//! buffer** pages (`Buf::Gc(n)`) belong to the engine's one GC batch. A GC read owns its
//! pages `n .. n + pages` from `poll_io` to `read_done`; a GC append reads the pages it
//! names from `poll_io` to `append_done`. The engine issues a batch's appends only after
//! all its reads completed, and gathers the next batch only after all its appends
//! completed, so a read and an append never share a page. **Read-ahead cache** pages
//! belong to a fault whose read the core claimed them for, from `FaultStep::Read` to
//! `fault_read_done`; otherwise they are read only under the state lock, by the install
//! (`CopyFrom::Cache`) of a fault they serve, while no read has them claimed.

use znswap_pager_core::PAGE_BYTES;

use crate::sys::map_anonymous;

/// One page of bytes on a page boundary.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
pub(crate) struct AlignedPage(pub [u8; PAGE_BYTES]);

impl AlignedPage {
    pub(crate) const ZERO: AlignedPage = AlignedPage([0; PAGE_BYTES]);
}

/// Zeroes to append (padding), aligned like any other page of an append.
pub(crate) static ZERO_PAGE: AlignedPage = AlignedPage::ZERO;

/// `count` zeroed pages in a fresh anonymous mapping of their own: they read as zeroes
/// without being touched, so a buffer costs no resident memory until it is used
/// (`znswap run` counts the pager's own memory against the program's `--memory`, and the
/// GC buffer alone is 4 MiB; an allocator's zeroed allocation may clear it by writing).
pub(crate) struct ZeroedPages {
    pages: *mut AlignedPage,
    count: usize,
}

// SAFETY: plain memory owned by this value; access follows the borrow rules of the
// slices handed out.
unsafe impl Send for ZeroedPages {}
unsafe impl Sync for ZeroedPages {}

impl ZeroedPages {
    pub(crate) fn new(count: usize) -> ZeroedPages {
        if count == 0 {
            return ZeroedPages { pages: std::ptr::NonNull::dangling().as_ptr(), count };
        }
        let pages = map_anonymous(count * PAGE_BYTES).expect("mapping a pager buffer").cast::<AlignedPage>();
        ZeroedPages { pages, count }
    }
}

impl std::ops::Deref for ZeroedPages {
    type Target = [AlignedPage];
    fn deref(&self) -> &[AlignedPage] {
        // SAFETY: `count` pages of our own mapping (all-zero bytes are a valid page).
        unsafe { std::slice::from_raw_parts(self.pages, self.count) }
    }
}

impl std::ops::DerefMut for ZeroedPages {
    fn deref_mut(&mut self) -> &mut [AlignedPage] {
        // SAFETY: as above, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.pages, self.count) }
    }
}

impl Drop for ZeroedPages {
    fn drop(&mut self) {
        if self.count > 0 {
            // SAFETY: our own mapping; nothing borrows it past `self`.
            unsafe { libc::munmap(self.pages.cast(), self.count * PAGE_BYTES) };
        }
    }
}

/// The bytes of consecutive aligned pages, as one slice.
pub(crate) fn bytes(pages: &[AlignedPage]) -> &[u8] {
    // SAFETY: as in `bytes_mut`.
    unsafe { std::slice::from_raw_parts(pages.as_ptr().cast::<u8>(), pages.len() * PAGE_BYTES) }
}

/// The bytes of consecutive aligned pages, as one mutable slice.
pub(crate) fn bytes_mut(pages: &mut [AlignedPage]) -> &mut [u8] {
    // SAFETY: `AlignedPage` is `repr(C)` over `[u8; PAGE_BYTES]` with a size of exactly
    // PAGE_BYTES (its alignment), so consecutive pages are consecutive bytes.
    unsafe { std::slice::from_raw_parts_mut(pages.as_mut_ptr().cast::<u8>(), pages.len() * PAGE_BYTES) }
}

pub(crate) struct PageBuffers {
    pages: ZeroedPages,
}

// SAFETY: every access goes through the unsafe accessors, whose callers own the pages
// (module comment), so no two threads touch one page at once.
unsafe impl Sync for PageBuffers {}
unsafe impl Send for PageBuffers {}

impl PageBuffers {
    pub(crate) fn new(count: usize) -> PageBuffers {
        PageBuffers { pages: ZeroedPages::new(count) }
    }

    /// The bytes of page `handle`.
    ///
    /// # Safety
    /// The caller owns `handle` (module comment) and nobody writes it meanwhile.
    pub(crate) unsafe fn page(&self, handle: u64) -> &[u8; PAGE_BYTES] {
        assert!((handle as usize) < self.pages.count, "page {handle} beyond the buffer");
        // SAFETY: within the mapping (checked); only this page is borrowed, so other
        // owners' pages stay theirs (not through `Deref`, which would borrow them all).
        unsafe { &(*self.pages.pages.add(handle as usize)).0 }
    }

    /// Pages `first .. first + count` as one slice, to fill (a device read).
    ///
    /// # Safety
    /// The caller owns these pages (module comment) and nobody else reads or writes them
    /// while the borrow lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn pages_mut(&self, first: usize, count: usize) -> &mut [u8] {
        assert!(first + count <= self.pages.len(), "pages beyond the buffer");
        // SAFETY: the pages are consecutive in one mapping, `count * PAGE_BYTES` bytes
        // from `first`; the caller guarantees exclusive access (interior mutability of
        // memory this value owns, handed out by ownership, not by `&mut self`).
        unsafe { std::slice::from_raw_parts_mut(self.pages.pages.add(first).cast::<u8>(), count * PAGE_BYTES) }
    }
}

#[cfg(test)]
mod tests {
    use super::{bytes_mut, AlignedPage, PageBuffers, PAGE_BYTES};

    #[test]
    fn buffers_are_distinct_aligned_pages() {
        let buffers = PageBuffers::new(3);
        // SAFETY: this test owns every page.
        unsafe {
            buffers.pages_mut(0, 1).fill(1);
            buffers.pages_mut(2, 1).fill(3);
            assert!(buffers.page(0).iter().all(|&b| b == 1));
            assert!(buffers.page(1).iter().all(|&b| b == 0));
            assert!(buffers.page(2).iter().all(|&b| b == 3));
            let run = buffers.pages_mut(1, 2);
            assert_eq!(run.as_ptr() as usize % PAGE_BYTES, 0, "page-aligned for O_DIRECT");
            assert_eq!(run.len(), 2 * PAGE_BYTES);
            assert!(run[..PAGE_BYTES].iter().all(|&b| b == 0));
            assert!(run[PAGE_BYTES..].iter().all(|&b| b == 3));
            run[..PAGE_BYTES].fill(2);
            assert!(buffers.page(1).iter().all(|&b| b == 2));
        }
        let mut pages = vec![AlignedPage::ZERO; 2];
        let bytes = bytes_mut(&mut pages);
        assert_eq!(bytes.as_ptr() as usize % PAGE_BYTES, 0);
        assert_eq!(bytes.len(), 2 * PAGE_BYTES);
    }
}
