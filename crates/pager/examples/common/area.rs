//! An anonymous mapping for the userfaultfd probes (`uffd_facts`, `uffd_wp_async`).

use znswap_pager::{map_anonymous, PAGE_BYTES};

pub const PAGE: u64 = PAGE_BYTES as u64;

/// An anonymous mapping, unmapped when dropped.
pub struct Area {
    pub base: u64,
    pub pages: u64,
}

impl Area {
    pub fn new(pages: u64) -> Area {
        let base = map_anonymous((pages * PAGE) as usize).expect("mmap") as u64;
        Area { base, pages }
    }

    pub fn at(&self, page: u64) -> u64 {
        assert!(page < self.pages);
        self.base + page * PAGE
    }

    /// Writes one byte to each page (each becomes a private, exclusive anonymous page).
    pub fn touch(&self) {
        for page in 0..self.pages {
            self.touch_page(page);
        }
    }

    pub fn touch_page(&self, page: u64) {
        // SAFETY: a page of our own mapping.
        unsafe { ((self.at(page)) as *mut u8).write_volatile(page as u8 | 1) };
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.base as *mut libc::c_void, (self.pages * PAGE) as usize) };
    }
}
