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
