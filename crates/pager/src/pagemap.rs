//! `PAGEMAP_SCAN` (Linux 6.7) on `/proc/self/pagemap`: which pages of a range were
//! written since they were last write-protected, asked of the kernel with no fault and
//! no page touched. With `UFFD_FEATURE_WP_ASYNC` a write to a protected page goes ahead
//! and clears its protection; a page "written" is one not protected. `PM_SCAN_WP_MATCHING`
//! protects the pages it reports again, in the same walk, for a small fraction of what a
//! write-protect fault costs a page (`examples/uffd_wp_async.rs`; figures:
//! `docs/wp-async-facts.md`).
//!
//! The kernel cannot vouch for a page with nothing mapped (never touched, discarded,
//! moved away): those scan as written, and `PM_SCAN_WP_MATCHING` puts a write-protect
//! marker in each such entry (`make_uffd_wp_pte`), which `UFFDIO_ZEROPAGE` and
//! `UFFDIO_MOVE` then refuse (`EEXIST`): the pager never protects with a scan.
//!
//! Also `page_at`: one entry read, to tell where a page is after a failed move.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `struct pm_scan_arg` of `<linux/fs.h>`.
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`: `start..end` share `categories`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = (3 << 30) | ((std::mem::size_of::<PmScanArg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PAGE_IS_WRITTEN: u64 = 1 << 1;
const PAGE_IS_PRESENT: u64 = 1 << 3;

/// Runs the output buffer holds before a scan goes on from where it stopped.
const RUNS_PER_CALL: usize = 256;

/// A scanner: the open page map and its output buffer, made once per thread that scans.
pub struct WrittenScan {
    file: File,
    runs: Vec<PageRegion>,
}

impl WrittenScan {
    /// Opens the page map, and checks that this kernel has `PAGEMAP_SCAN` with a scan
    /// of one page of a scratch mapping.
    pub fn open() -> io::Result<WrittenScan> {
        let mut scan =
            WrittenScan { file: File::open("/proc/self/pagemap")?, runs: vec![PageRegion::default(); RUNS_PER_CALL] };
        let page = znswap_pager_core::PAGE_BYTES;
        let scratch = crate::sys::map_anonymous(page)?;
        let probed = scan.scan(scratch as u64, scratch as u64 + page as u64, false, &mut |_, _| {});
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(scratch.cast(), page) };
        probed.map(|()| scan)
    }

    /// Gives `found` each run `start..end` of pages in `start..end` written since they
    /// were last protected (or with nothing mapped), in address order; with `protect`,
    /// protects them again (the range must be registered with a `WP_ASYNC`
    /// userfaultfd).
    pub fn scan(&mut self, start: u64, end: u64, protect: bool, found: &mut dyn FnMut(u64, u64)) -> io::Result<()> {
        let flags = if protect { PM_SCAN_WP_MATCHING } else { 0 };
        self.scan_category(start, end, flags, PAGE_IS_WRITTEN, found)
    }

    fn scan_category(
        &mut self,
        start: u64,
        end: u64,
        flags: u64,
        category: u64,
        found: &mut dyn FnMut(u64, u64),
    ) -> io::Result<()> {
        let mut from = start;
        while from < end {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                flags,
                start: from,
                end,
                vec: self.runs.as_mut_ptr() as u64,
                vec_len: self.runs.len() as u64,
                category_mask: category,
                return_mask: category,
                ..PmScanArg::default()
            };
            // SAFETY: the argument and the buffer it names outlive the call, and the
            // buffer holds `vec_len` runs.
            let count = unsafe { libc::ioctl(self.file.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
            if count < 0 {
                return Err(io::Error::last_os_error());
            }
            for run in &self.runs[..count as usize] {
                found(run.start, run.end);
            }
            if arg.walk_end <= from {
                return Err(io::Error::other("PAGEMAP_SCAN made no progress"));
            }
            from = arg.walk_end;
        }
        Ok(())
    }
}

/// The pages mapped in `start..end` of process `pid` (page indexes from `start`), from
/// its page map (`PAGEMAP_SCAN`, no page touched): a fork's child's copies of its
/// parent's pages, which a pager taking the child counts resident. Read by the pager
/// itself, so they are the kernel's word, not the child's. (Pages the kernel's own swap
/// holds, and markers, are not mapped: not counted.)
pub fn present_pages(pid: u32, start: u64, end: u64) -> io::Result<Vec<u64>> {
    let page = znswap_pager_core::PAGE_BYTES as u64;
    let mut scan = WrittenScan {
        file: File::open(format!("/proc/{pid}/pagemap"))?,
        runs: vec![PageRegion::default(); RUNS_PER_CALL],
    };
    let mut pages = Vec::new();
    scan.scan_category(start, end, 0, PAGE_IS_PRESENT, &mut |from, to| {
        pages.extend((from - start) / page..(to - start) / page);
    })?;
    Ok(pages)
}

/// Whether a page is at `address`: present, or a swap entry the kernel's own swap left
/// there (a program in a memory cgroup with swap), read from `/proc/self/pagemap`
/// without touching the page. A userfaultfd write-protect marker (a swap-type entry
/// with the write-protect bit, bit 57) is no page. (A page the kernel swapped out while
/// write-protected reads the same: not a page here, a case a failed move does not meet
/// in practice.) For rare paths: a failed move or copy.
pub fn page_at(address: u64) -> bool {
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    const UFFD_WP: u64 = 1 << 57;
    let mut entry = 0u64;
    // SAFETY: a NUL-terminated path; an 8-byte read into `entry`; the descriptor is
    // closed before returning.
    let read = unsafe {
        let fd = libc::open(c"/proc/self/pagemap".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        assert!(fd >= 0, "opening /proc/self/pagemap: {}", std::io::Error::last_os_error());
        let offset = (address / znswap_pager_core::PAGE_BYTES as u64 * 8) as libc::off_t;
        let read = libc::pread(fd, (&mut entry as *mut u64).cast(), 8, offset);
        libc::close(fd);
        read
    };
    assert_eq!(read, 8, "reading /proc/self/pagemap at {address:#x}: {}", std::io::Error::last_os_error());
    entry & PRESENT != 0 || entry & SWAPPED != 0 && entry & UFFD_WP == 0
}

#[cfg(test)]
mod tests {
    use super::{page_at, present_pages};
    use znswap_pager_core::PAGE_BYTES;

    /// The page map tells a mapped page from an empty one, and a discarded one is empty.
    #[test]
    fn the_page_map_says_what_is_mapped() {
        // SAFETY: a fresh private mapping of two pages, ours, unmapped at the end.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            let first = base as u64;
            let second = first + PAGE_BYTES as u64;
            (second as *mut u8).write_volatile(1);
            assert!(!page_at(first), "never touched");
            assert!(page_at(second), "written");
            assert_eq!(libc::madvise(second as *mut libc::c_void, PAGE_BYTES, libc::MADV_DONTNEED), 0);
            assert!(!page_at(second), "discarded");
            (first as *mut u8).write_volatile(1);
            let present = present_pages(std::process::id(), first, second + PAGE_BYTES as u64).unwrap();
            assert_eq!(present, vec![0], "only the first page is mapped now");
            libc::munmap(base, 2 * PAGE_BYTES);
        }
    }
}
