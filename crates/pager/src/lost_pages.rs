//! Surviving a lost page: for programs (and the bench) that would rather count a page
//! the device lost than die of it.
//!
//! The pager poisons a page whose only copy the device lost: touching it raises SIGBUS
//! (`BUS_MCEERR_AR`, or `BUS_ADRERR` on kernels built without memory-failure handling). That kills a program by default, which is right for a
//! program that cannot tell (the kernel's own swap does the same). A program that can
//! installs this handler before any pager starts (the self-paging pager's own handler,
//! installed with the first such pager, hands every SIGBUS that is not a userfault to
//! the handler it found: this one) and watches its regions: a SIGBUS at an address in a
//! watched region sets the page's bit in the region's bitmap and maps a fresh anonymous
//! page over the poisoned one (the page leaves the pager's care), so the access
//! completes and the thread goes on; the program asks `Watch::is_lost` before trusting
//! what it reads. Everything else goes to the disposition found at install.
//!
//! Only atomics and `mmap` run in the handler: both async-signal-safe.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock};

use znswap_pager_core::PAGE_BYTES;

/// Regions watched at once.
pub const WATCHES_MAX: usize = 16;

struct Slot {
    /// 0 while free.
    base: AtomicUsize,
    pages: AtomicUsize,
    bitmap: AtomicPtr<AtomicU64>,
}

static SLOTS: [Slot; WATCHES_MAX] = [const {
    Slot { base: AtomicUsize::new(0), pages: AtomicUsize::new(0), bitmap: AtomicPtr::new(std::ptr::null_mut()) }
}; WATCHES_MAX];
static CLAIM: Mutex<()> = Mutex::new(());
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LostPagesError {
    #[error("installing the SIGBUS handler for lost pages failed: {0}")]
    Sigaction(std::io::Error),
    #[error("watch the lost pages of at most {WATCHES_MAX} regions at once; drop a watch first")]
    TooManyWatches,
    #[error("install the lost-page handler (`lost_pages::install`) before watching a region")]
    NotInstalled,
}

/// Installs the handler, once per process; call it before starting any pager.
pub fn install() -> Result<(), LostPagesError> {
    let _claim = CLAIM.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if PREVIOUS.get().is_some() {
        return Ok(());
    }
    let previous = crate::signals::install(libc::SIGBUS, on_sigbus, false).map_err(LostPagesError::Sigaction)?;
    let _ = PREVIOUS.set(previous);
    Ok(())
}

/// A region whose lost pages are recorded while this lives.
pub struct Watch {
    slot: usize,
    bitmap: Box<[AtomicU64]>,
}

/// Watches `pages` pages from `base` (a region's `as_ptr()` and `pages()`).
pub fn watch(base: usize, pages: u64) -> Result<Watch, LostPagesError> {
    if PREVIOUS.get().is_none() {
        return Err(LostPagesError::NotInstalled);
    }
    let bitmap: Box<[AtomicU64]> = (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
    let _claim = CLAIM.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let slot = SLOTS.iter().position(|slot| slot.base.load(SeqCst) == 0).ok_or(LostPagesError::TooManyWatches)?;
    SLOTS[slot].pages.store(pages as usize, SeqCst);
    SLOTS[slot].bitmap.store(bitmap.as_ptr() as *mut AtomicU64, SeqCst);
    SLOTS[slot].base.store(base, SeqCst);
    Ok(Watch { slot, bitmap })
}

impl Watch {
    /// Whether the page was found lost (its content since is a fresh page's zeros or
    /// what the program wrote there after: not its data).
    pub fn is_lost(&self, page: u64) -> bool {
        self.bitmap[page as usize / 64].load(SeqCst) & 1 << (page % 64) != 0
    }

    /// Pages found lost so far.
    pub fn count(&self) -> u64 {
        self.bitmap.iter().map(|word| word.load(SeqCst).count_ones() as u64).sum()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // Dropped once nothing touches the region: no handler can be reading the slot.
        SLOTS[self.slot].base.store(0, SeqCst);
    }
}

extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler.
    let (code, address) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code == libc::BUS_MCEERR_AR || code == libc::BUS_ADRERR {
        for slot in &SLOTS {
            let base = slot.base.load(SeqCst);
            let pages = slot.pages.load(SeqCst);
            if base == 0 || address < base || address >= base + pages * PAGE_BYTES {
                continue;
            }
            let page = (address - base) / PAGE_BYTES;
            // SAFETY: the bitmap lives as long as the slot is claimed (base != 0).
            unsafe { &*slot.bitmap.load(SeqCst).add(page / 64) }.fetch_or(1 << (page % 64), SeqCst);
            // SAFETY: errno of this thread, restored for the interrupted code; the
            // mapping replaces exactly the poisoned page of a watched region.
            unsafe {
                let errno = *libc::__errno_location();
                let mapped = libc::mmap(
                    (base + page * PAGE_BYTES) as *mut libc::c_void,
                    PAGE_BYTES,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                *libc::__errno_location() = errno;
                if mapped != libc::MAP_FAILED {
                    return;
                }
            }
        }
    }
    crate::signals::chain(PREVIOUS.get().copied(), signal, info, context);
}
