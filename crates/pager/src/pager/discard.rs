//! Dropping pages of the pager's own process that are on the device (or were all zero):
//! `MADV_DONTNEED`, batched through `process_madvise` where the kernel allows it on the
//! calling process (6.13+: a TLB flush per batch instead of per page). A served
//! process's pages are dropped by its agent instead (`Spaces::discard`).

use znswap_pager_core::{AddressRange, PAGE_BYTES};

use crate::sys::map_anonymous;

const _: () = assert!(std::mem::size_of::<AddressRange>() == std::mem::size_of::<libc::iovec>());
const _: () = assert!(std::mem::align_of::<AddressRange>() == std::mem::align_of::<libc::iovec>());

/// Kernels cap a vector at `IOV_MAX` entries.
const BATCH: usize = 512;

pub(super) struct OwnDiscard {
    /// A pidfd of this process, where `process_madvise(MADV_DONTNEED)` works through it.
    pidfd: Option<i32>,
}

impl OwnDiscard {
    /// Probes `process_madvise` for a pager of its own process (`own`); a served one
    /// never discards this way.
    pub(super) fn new(own: bool) -> OwnDiscard {
        OwnDiscard { pidfd: if own { pidfd_for_discard() } else { None } }
    }

    /// `MADV_DONTNEED` over `ranges`: one `process_madvise` per batch where the kernel
    /// allows it, else one `madvise` each.
    pub(super) fn dontneed(&self, ranges: &[AddressRange]) {
        let mut rest = ranges;
        if let Some(pidfd) = self.pidfd {
            while !rest.is_empty() {
                let batch = &rest[..rest.len().min(BATCH)];
                let bytes: usize = batch.iter().map(|r| r.len).sum();
                // SAFETY: the ranges are pages of our own mappings whose contents are on
                // the device (or were all zero); `AddressRange` is laid out as iovec
                // (asserted above), and the array outlives the call.
                let done = unsafe {
                    libc::syscall(libc::SYS_process_madvise, pidfd, batch.as_ptr(), batch.len(), libc::MADV_DONTNEED, 0)
                };
                if done < 0 || done as usize != bytes {
                    // A partial or refused batch: finish it range by range below.
                    break;
                }
                rest = &rest[batch.len()..];
            }
        }
        for range in rest {
            // SAFETY: as above; MADV_DONTNEED of an already dropped range is harmless.
            let rc = unsafe { libc::madvise(range.start as *mut libc::c_void, range.len, libc::MADV_DONTNEED) };
            assert_eq!(rc, 0, "MADV_DONTNEED: {}", std::io::Error::last_os_error());
        }
    }
}

impl Drop for OwnDiscard {
    fn drop(&mut self) {
        if let Some(pidfd) = self.pidfd {
            // SAFETY: our own descriptor; the threads that used it have stopped (the
            // pager drops its shared state last).
            unsafe { libc::close(pidfd) };
        }
    }
}

/// A pidfd of this process if `process_madvise(MADV_DONTNEED)` works through it: probed
/// on a scratch page, because kernels before 6.13 refuse destructive advice there.
fn pidfd_for_discard() -> Option<i32> {
    // SAFETY: plain syscalls on a fresh scratch mapping, unmapped before returning.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as i32;
        if pidfd < 0 {
            return None;
        }
        let scratch = map_anonymous(PAGE_BYTES).ok()?;
        scratch.write(1);
        let range = libc::iovec { iov_base: scratch.cast(), iov_len: PAGE_BYTES };
        let done = libc::syscall(libc::SYS_process_madvise, pidfd, &range, 1, libc::MADV_DONTNEED, 0);
        let dropped = done == PAGE_BYTES as i64 && scratch.read() == 0;
        libc::munmap(scratch.cast(), PAGE_BYTES);
        if dropped {
            Some(pidfd)
        } else {
            libc::close(pidfd);
            None
        }
    }
}
