//! What programs do to their memory beyond malloc, given the semantics of plain
//! anonymous memory over the paged heap.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::alloc::Internal;

pub(crate) static MLOCKS_IGNORED: AtomicU64 = AtomicU64::new(0);
static MLOCK_WARNED: AtomicBool = AtomicBool::new(false);

fn mlock_ignored(what: &str) {
    MLOCKS_IGNORED.fetch_add(1, Relaxed);
    if !MLOCK_WARNED.swap(true, Relaxed) {
        let _internal = Internal::enter();
        eprintln!("znswap run: {what} ignored: the heap is paged by znswap, and locking it would pin the whole arena");
    }
}

/// `mlockall` would fault in the whole reserved arena: neutralised (the program runs
/// as if its memory were locked, which under a budget it cannot be).
#[no_mangle]
pub unsafe extern "C" fn mlockall(_flags: i32) -> i32 {
    mlock_ignored("mlockall");
    0
}

#[no_mangle]
pub unsafe extern "C" fn munlockall() -> i32 {
    0
}

#[no_mangle]
pub unsafe extern "C" fn mlock(address: *const libc::c_void, len: usize) -> i32 {
    if crate::overlaps_arena(address as u64, len as u64) {
        mlock_ignored("mlock of the paged heap");
        return 0;
    }
    libc::syscall(libc::SYS_mlock, address, len) as i32
}

#[no_mangle]
pub unsafe extern "C" fn mlock2(address: *const libc::c_void, len: usize, flags: u32) -> i32 {
    if crate::overlaps_arena(address as u64, len as u64) {
        mlock_ignored("mlock2 of the paged heap");
        return 0;
    }
    libc::syscall(libc::SYS_mlock2, address, len, flags) as i32
}

/// `madvise` over the paged heap keeps the semantics of anonymous memory: a discard
/// reads back zero and frees its slots (`Pager::program_discard`); transparent huge
/// pages are refused (they would fault and swap 2 MiB at a time). Elsewhere, as is.
#[no_mangle]
pub unsafe extern "C" fn madvise(address: *mut libc::c_void, len: usize, advice: i32) -> i32 {
    const MADV_DONTNEED_LOCKED: i32 = 24;
    const MADV_COLLAPSE: i32 = 25;
    let start = address as u64;
    let Some(runtime) = crate::RUNTIME.get().filter(|_| crate::overlaps_arena(start, len as u64)) else {
        return libc::syscall(libc::SYS_madvise, address, len, advice) as i32;
    };
    match advice {
        libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE | MADV_DONTNEED_LOCKED => {
            if crate::alloc::is_internal_thread() {
                // The arena is pinned for mimalloc, and the pager's threads never touch
                // it: a discard from one would be a bug that loses the program's data.
                eprintln!(
                    "znswap run: a pager thread discarded paged memory at {start:#x}; stopping rather than losing data"
                );
                libc::abort();
            }
            let _internal = Internal::enter();
            runtime.pager.program_discard(start, len as u64)
        }
        libc::MADV_HUGEPAGE | MADV_COLLAPSE => 0,
        // A forked child keeps the whole arena: a hole in it would fault its heap (and
        // free() into the hole) with nothing there. Keeping the copy is what a child
        // that never touches it sees anyway.
        libc::MADV_DONTFORK | libc::MADV_DOFORK | libc::MADV_KEEPONFORK => 0,
        libc::MADV_WIPEONFORK => {
            let _internal = Internal::enter();
            eprintln!("znswap run: madvise(MADV_WIPEONFORK) of paged memory is not supported; refused (EINVAL)");
            crate::alloc::set_errno(libc::EINVAL);
            -1
        }
        _ => libc::syscall(libc::SYS_madvise, address, len, advice) as i32,
    }
}

pub(crate) static FORKS: AtomicU64 = AtomicU64::new(0);

/// The C library's `fork`, found past this library.
unsafe fn real_fork() -> libc::pid_t {
    static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut real = REAL.load(Relaxed);
    if real == 0 {
        real = libc::dlsym(libc::RTLD_NEXT, c"fork".as_ptr()) as usize;
        assert_ne!(real, 0, "no fork() after the preload library");
        REAL.store(real, Relaxed);
    }
    let real: extern "C" fn() -> libc::pid_t = std::mem::transmute(real);
    real()
}

/// A forked child sees its memory exactly as at the fork, pages on the device
/// included (`Pager::fork`): redis's BGSAVE child writes the snapshot it forked.
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let Some(runtime) = crate::RUNTIME.get() else { return real_fork() };
    let _internal = Internal::enter();
    let heap = crate::alloc::PAGED_HEAP.load(Relaxed);
    // No other thread is changing the program's mappings at the fork: the child gets
    // the table whole and unlocked.
    let mappings = crate::mapping::lock();
    let pid = runtime.pager.fork(|| {
        let pid = real_fork();
        if pid == 0 {
            // In the child, its fault thread starts up before it can mark itself: no
            // allocation goes to paged memory until it serves faults.
            crate::alloc::PAGED_HEAP.store(std::ptr::null_mut(), Relaxed);
        }
        pid
    });
    drop(mappings);
    if pid == 0 {
        crate::alloc::PAGED_HEAP.store(heap, Relaxed);
    }
    if pid > 0 {
        FORKS.fetch_add(1, Relaxed);
    }
    pid
}

/// `daemon()` forks inside the C library, out of this library's sight, and a daemon
/// outlives the launcher that keeps its pages readable: refused, with the fix.
#[no_mangle]
pub unsafe extern "C" fn daemon(_nochdir: i32, _noclose: i32) -> i32 {
    if crate::RUNTIME.get().is_none() {
        let real = libc::dlsym(libc::RTLD_NEXT, c"daemon".as_ptr());
        if real.is_null() {
            crate::alloc::set_errno(libc::ENOSYS);
            return -1;
        }
        let real: extern "C" fn(i32, i32) -> i32 = std::mem::transmute(real);
        return real(_nochdir, _noclose);
    }
    let _internal = Internal::enter();
    eprintln!("znswap run: the program asked to become a daemon; znswap pages a program only in the foreground (run it without its daemon option)");
    crate::alloc::set_errno(libc::ENOTSUP);
    -1
}
