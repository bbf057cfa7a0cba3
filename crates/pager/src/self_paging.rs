//! Self-paging mode: with `UFFD_FEATURE_SIGBUS` a userfault raises SIGBUS in the faulting
//! thread, and this module's signal handler resolves the fault right there (swap-in,
//! zero-fill, or the write-protect upgrade) before the access is retried. No handler
//! thread, no wake-up, no context switch: a fault costs a signal's delivery where a
//! handler thread costs two wake-ups (`docs/measurements/2026-11-pager.md`).
//!
//! What it asks of the application:
//! - the kernel must never touch region memory on its behalf (a `read()` into a region
//!   page that is swapped out fails with `EFAULT` instead of faulting it in): use the
//!   handler-thread mode for such programs;
//! - no SIGBUS handler of its own installed after the pager starts (ours chains to the
//!   one it found, and to the default action for faults that are not ours).
//!
//! Why locks and allocation in a signal handler are sound here: SIGBUS from a userfault
//! is synchronous, raised by an ordinary load or store to region memory. The allocator
//! never touches region memory, and no pager code touches it while holding the pager's
//! lock, so the interrupted thread never holds a lock the handler takes.

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};

use crate::pager::fault::resolve_in_thread;
use crate::pager::lock_flag::holds_state_lock;
use crate::pager::shared::Shared;

/// Pagers in self-paging mode at once.
const PAGERS_MAX: usize = 16;

static PAGERS: [AtomicPtr<Shared>; PAGERS_MAX] = [const { AtomicPtr::new(ptr::null_mut()) }; PAGERS_MAX];
/// Signal handlers running now: an unregistering pager waits for them before it lets go
/// of its state.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// The SIGBUS disposition found when the first self-paging pager started.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALL: Mutex<()> = Mutex::new(());

/// x86 page-fault error code bit: the access was a write.
#[cfg(target_arch = "x86_64")]
const X86_PF_WRITE: i64 = 1 << 1;

#[derive(Debug, thiserror::Error)]
pub enum SelfPagingError {
    #[error("too many self-paging pagers ({PAGERS_MAX}); use the handler-thread mode for more")]
    TooMany,
    #[error("installing the SIGBUS handler failed: {0}")]
    Sigaction(std::io::Error),
}

/// A registration; dropping it unregisters the pager and waits until no signal handler
/// still looks at it.
pub(crate) struct Registration {
    index: usize,
    shared: *const Shared,
}

// SAFETY: the pointer is an `Arc` strong count we own; it is only turned back into an
// `Arc` once, on drop.
unsafe impl Send for Registration {}
unsafe impl Sync for Registration {}

pub(crate) fn register(shared: &Arc<Shared>) -> Result<Registration, SelfPagingError> {
    install_handler()?;
    let raw = Arc::into_raw(shared.clone()) as *mut Shared;
    for (index, slot) in PAGERS.iter().enumerate() {
        if slot.compare_exchange(ptr::null_mut(), raw, SeqCst, SeqCst).is_ok() {
            return Ok(Registration { index, shared: raw });
        }
    }
    // SAFETY: giving back the strong count taken above.
    drop(unsafe { Arc::from_raw(raw) });
    Err(SelfPagingError::TooMany)
}

impl Drop for Registration {
    fn drop(&mut self) {
        PAGERS[self.index].store(ptr::null_mut(), SeqCst);
        // A handler that loaded the pointer before the store may still be using it.
        while ACTIVE.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
        // SAFETY: the strong count taken in `register`; no handler can reach it now.
        drop(unsafe { Arc::from_raw(self.shared) });
    }
}

fn install_handler() -> Result<(), SelfPagingError> {
    let _guard = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    if PREVIOUS.get().is_some() {
        return Ok(());
    }
    let previous = crate::signals::install(libc::SIGBUS, on_sigbus, true).map_err(SelfPagingError::Sigaction)?;
    let _ = PREVIOUS.set(previous);
    Ok(())
}

extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler.
    let (code, address) = unsafe { ((*info).si_code, (*info).si_addr() as u64) };
    // Only userfaults arrive as BUS_ADRERR; a poisoned (lost) page is BUS_MCEERR_AR and
    // must kill as usual.
    if code == libc::BUS_ADRERR {
        if holds_state_lock() {
            // The interrupted code holds the lock this handler would take: a pager bug
            // that touched region memory under it. Waiting would deadlock; say so.
            const MESSAGE: &[u8] =
                b"znswap: a pager thread touched region memory while holding its state lock; aborting\n";
            // SAFETY: write(2) of a static buffer, async-signal-safe.
            unsafe { libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len()) };
            std::process::abort();
        }
        // SAFETY: errno of this thread, restored below for the interrupted code.
        let errno = unsafe { *libc::__errno_location() };
        ACTIVE.fetch_add(1, SeqCst);
        let write = fault_was_write(context);
        let mut resolved = false;
        for slot in &PAGERS {
            let shared = slot.load(SeqCst);
            if shared.is_null() {
                continue;
            }
            // SAFETY: registered pagers stay alive while ACTIVE counts this handler.
            if resolve_in_thread(unsafe { &*shared }, address, write) {
                resolved = true;
                break;
            }
        }
        ACTIVE.fetch_sub(1, SeqCst);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        if resolved {
            return;
        }
    }
    crate::signals::chain(PREVIOUS.get().copied(), signal, info, context);
}

/// Whether the faulting access was a write, from the x86 page-fault error code the
/// kernel leaves in the signal frame. Elsewhere: assume a read (a write then costs one
/// more fault, on the write-protected page).
fn fault_was_write(context: *mut libc::c_void) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if context.is_null() {
            return false;
        }
        // SAFETY: an SA_SIGINFO handler's third argument is the ucontext of the thread.
        let context = unsafe { &*(context as *const libc::ucontext_t) };
        context.uc_mcontext.gregs[libc::REG_ERR as usize] & X86_PF_WRITE != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = context;
        false
    }
}
