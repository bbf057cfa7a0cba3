//! The malloc family, replaced: the program's allocations come from the paged heap (a
//! mimalloc heap whose only arena is the pager's region), the pager's own from
//! mimalloc's default heap in ordinary memory.
//!
//! glibc's malloc calls its own mmap/brk internally, so wrapping `mmap` would see
//! almost none of a program's heap; glibc documents replacing the whole malloc family
//! instead, and then libc's internal allocations use it too. Debian's redis calls
//! libjemalloc through these same names (and `nallocx`, defined here so its size
//! predictions match this allocator).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};

use libmimalloc_sys as mi;

/// The paged heap, null until the pager runs (allocations before that, by the loader
/// and libc's start-up, go to the default heap and are freed there just the same).
pub(crate) static PAGED_HEAP: AtomicPtr<mi::mi_heap_t> = AtomicPtr::new(std::ptr::null_mut());

/// Bytes allocated outside the arena because it was full (counted, reported as not
/// covered by the pager).
pub(crate) static OVERFLOW_BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the pager's threads (and while the preload itself works): their
    /// allocations must never land in paged memory, which only they can bring back.
    static INTERNAL: Cell<bool> = const { Cell::new(false) };
    /// Set for good on the pager's own threads (`mark_internal_thread`).
    static PAGER_THREAD: Cell<bool> = const { Cell::new(false) };
    /// In one of the program's own allocator calls (not the library's, nor a pager
    /// thread's), where mimalloc may purge the paged arena (`crate::arena_commit`):
    /// this thread holds none of the library's locks there.
    static PROGRAM_CALL: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one of the pager's for good (`PagerConfig::thread_start`),
/// and blocks signals on it: the program's handlers must run on the program's threads
/// (a handler touching paged memory on a fault handler thread would wait for itself),
/// and the pager's system calls need no `EINTR` handling.
pub(crate) fn mark_internal_thread() {
    INTERNAL.with(|internal| internal.set(true));
    PAGER_THREAD.with(|pager| pager.set(true));
    // SAFETY: changes only this thread's signal mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

pub(crate) fn is_internal_thread() -> bool {
    INTERNAL.with(Cell::get)
}

/// Whether the calling thread is one of the pager's (not a program thread inside one of
/// this library's calls).
pub(crate) fn is_pager_thread() -> bool {
    PAGER_THREAD.with(Cell::get)
}

/// The calling thread counts as internal while this lives.
pub(crate) struct Internal(bool);

impl Internal {
    pub(crate) fn enter() -> Internal {
        Internal(INTERNAL.with(|internal| internal.replace(true)))
    }
}

impl Drop for Internal {
    fn drop(&mut self) {
        INTERNAL.with(|internal| internal.set(self.0));
    }
}

/// An allocation for the calling thread: from the paged heap on the program's threads
/// once the pager runs, else (and when the arena is full: the bytes are reported as not
/// covered) from the default heap. The thread counts as internal during the call, so an
/// `mmap` mimalloc makes inside it goes to the kernel (`mapping.rs`), never back into
/// the allocator it is in the middle of.
///
/// # Safety
/// `paged` and `default` are calls into mimalloc that may be made from any thread.
#[inline]
unsafe fn allocate(
    size: usize,
    paged: impl FnOnce(*mut mi::mi_heap_t) -> *mut c_void,
    default: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    INTERNAL.with(|internal| {
        if internal.replace(true) {
            return default();
        }
        let heap = PAGED_HEAP.load(Relaxed);
        PROGRAM_CALL.set(true);
        let block = if heap.is_null() {
            default()
        } else {
            let block = paged(heap);
            if !block.is_null() || size == 0 {
                block
            } else {
                let block = default();
                if !block.is_null() {
                    OVERFLOW_BYTES.fetch_add(size as u64, Relaxed);
                }
                block
            }
        };
        PROGRAM_CALL.set(false);
        internal.set(false);
        block
    })
}

/// The pager's Rust allocations: the default heap, never the paged one.
pub struct InternalAllocator;

// SAFETY: mimalloc's aligned calls honour the layout's size and alignment, and a block
// is freed or grown only through the calls that made it.
unsafe impl GlobalAlloc for InternalAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()).cast() }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()).cast() }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (GlobalAlloc's contract).
        unsafe { mi::mi_free(ptr.cast()) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout` (GlobalAlloc's contract).
        unsafe { mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast() }
    }
}

pub(crate) fn set_errno(value: i32) {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = value };
}

// The malloc family. Each is the C function: the caller's contract is the C library's
// (a block passed in came from this family and is not used after it is freed), and
// mimalloc keeps it (its `mi_free` and `mi_usable_size` take blocks of any of its heaps).

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: allocations from mimalloc's heaps, callable from any thread.
    unsafe { allocate(size, |heap| mi::mi_heap_malloc(heap, size), || mi::mi_malloc(size)) }
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    let Some(bytes) = count.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    // SAFETY: as in `malloc`.
    unsafe { allocate(bytes, |heap| mi::mi_heap_calloc(heap, count, size), || mi::mi_calloc(count, size)) }
}

/// # Safety
/// As the C function: `block` is null or a live block of this family.
#[no_mangle]
pub unsafe extern "C" fn free(block: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { release(block) }
}

/// # Safety
/// As `free`.
#[no_mangle]
pub unsafe extern "C" fn cfree(block: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { release(block) }
}

/// # Safety
/// As the C function: `block` is null or a live block of this family.
#[no_mangle]
pub unsafe extern "C" fn realloc(block: *mut c_void, size: usize) -> *mut c_void {
    if block.is_null() {
        // SAFETY: as `malloc`.
        return unsafe { malloc(size) };
    }
    if size == 0 {
        // glibc frees and returns null; programs rely on it.
        // SAFETY: per the contract.
        unsafe { release(block) };
        return std::ptr::null_mut();
    }
    if let Some(carved) = carved(block, false) {
        // Moved to a plain block (realloc keeps no alignment beyond malloc's).
        // SAFETY: as `malloc`; the old block is live for `carved.usable` bytes.
        unsafe {
            let moved = malloc(size);
            if !moved.is_null() {
                std::ptr::copy_nonoverlapping(block.cast::<u8>(), moved.cast::<u8>(), size.min(carved.usable));
                release(block);
            }
            return moved;
        }
    }
    // A block moves to the paged heap as it grows once the pager runs; with the arena
    // full it stays in (or moves to) the default heap.
    // SAFETY: per the contract; mimalloc reallocates a block of any of its heaps.
    unsafe { allocate(size, |heap| mi::mi_heap_realloc(heap, block, size), || mi::mi_realloc(block, size)) }
}

/// # Safety
/// As `realloc`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(block: *mut c_void, count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: per the contract.
        Some(bytes) => unsafe { realloc(block, bytes) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// The largest alignment mimalloc serves from an arena (`MI_PAGE_MAX_OVERALLOC_ALIGN`,
/// 64 KiB): beyond it, it takes memory from the OS, outside the paged arena, so such
/// blocks are carved here from a larger block of the paged heap.
const ARENA_ALIGN_MAX: usize = 64 << 10;

/// A block of `size` bytes aligned to `alignment` (a power of two).
fn aligned(alignment: usize, size: usize) -> *mut c_void {
    if alignment > ARENA_ALIGN_MAX {
        // SAFETY: allocations from mimalloc's heaps, callable from any thread.
        return unsafe {
            allocate(size, |heap| large_aligned(heap, alignment, size), || mi::mi_malloc_aligned(size, alignment))
        };
    }
    // SAFETY: as above.
    unsafe {
        allocate(
            size,
            |heap| mi::mi_heap_malloc_aligned(heap, size, alignment),
            || mi::mi_malloc_aligned(size, alignment),
        )
    }
}

/// A block carved for an alignment beyond [`ARENA_ALIGN_MAX`]: the paged block it lies
/// in, and the bytes usable from its aligned start.
#[derive(Clone, Copy)]
pub(crate) struct Carved {
    block: usize,
    usable: usize,
}

/// Carved blocks by their aligned start. Leaf lock: nothing is allocated from the paged
/// heap or touched in paged memory while it is held (its nodes come from the default
/// heap); the fork wrapper holds it across `fork`, so a child never inherits it taken.
static CARVED: std::sync::Mutex<std::collections::BTreeMap<usize, Carved>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());
/// Carved blocks alive: `free` looks in `CARVED` only while some are.
static CARVED_LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub(crate) fn carved_table() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<usize, Carved>> {
    CARVED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `size` bytes aligned to `alignment` from the paged heap: a block `alignment` larger,
/// its aligned start recorded for `free`.
fn large_aligned(heap: *mut mi::mi_heap_t, alignment: usize, size: usize) -> *mut c_void {
    let Some(total) = size.max(1).checked_add(alignment) else { return std::ptr::null_mut() };
    // SAFETY: an allocation from the paged heap.
    let block = unsafe { mi::mi_heap_malloc(heap, total) };
    if block.is_null() {
        return block;
    }
    let start = (block as usize).next_multiple_of(alignment);
    // SAFETY: `block` is live and ours.
    let usable = unsafe { mi::mi_usable_size(block) } - (start - block as usize);
    carved_table().insert(start, Carved { block: block as usize, usable });
    CARVED_LIVE.fetch_add(1, Relaxed);
    start as *mut c_void
}

/// The carved block `pointer` starts, if it is one (removed from the table with `take`).
fn carved(pointer: *mut c_void, take: bool) -> Option<Carved> {
    if CARVED_LIVE.load(Relaxed) == 0 || (pointer as usize) % (2 * ARENA_ALIGN_MAX) != 0 {
        return None;
    }
    let mut table = carved_table();
    if take {
        let carved = table.remove(&(pointer as usize))?;
        CARVED_LIVE.fetch_sub(1, Relaxed);
        Some(carved)
    } else {
        table.get(&(pointer as usize)).copied()
    }
}

/// Frees `block` of this family, carved or not.
///
/// # Safety
/// `block` is null or a live block of this family.
unsafe fn release(block: *mut c_void) {
    let start = carved(block, true).map_or(block, |carved| carved.block as *mut c_void);
    let program = !is_internal_thread();
    PROGRAM_CALL.set(program);
    // SAFETY: per the contract; a carved block is freed through the block it lies in.
    unsafe { mi::mi_free(start) }
    PROGRAM_CALL.set(false);
}

/// Whether this thread is in one of the program's own `malloc` or `free` calls, and so
/// may discard paged memory for mimalloc (`crate::arena_commit`).
pub(crate) fn in_program_call() -> bool {
    PROGRAM_CALL.with(Cell::get)
}

/// # Safety
/// As the C function: `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> i32 {
    if !alignment.is_power_of_two() || alignment % std::mem::size_of::<*mut c_void>() != 0 {
        return libc::EINVAL;
    }
    let block = aligned(alignment, size);
    if block.is_null() && size != 0 {
        return libc::ENOMEM;
    }
    // SAFETY: per the contract.
    unsafe { *out = block };
    0
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(alignment: usize, size: usize) -> *mut c_void {
    if !alignment.is_power_of_two() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    aligned(alignment, size)
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn memalign(alignment: usize, size: usize) -> *mut c_void {
    // glibc rounds a non-power-of-two alignment up rather than failing.
    aligned(alignment.max(1).next_power_of_two(), size)
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(znswap_pager::PAGE_BYTES, size)
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let page = znswap_pager::PAGE_BYTES;
    aligned(page, size.div_ceil(page).max(1) * page)
}

/// # Safety
/// As the C function: `block` is null or a live block of this family.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(block: *mut c_void) -> usize {
    if block.is_null() {
        0
    } else if let Some(carved) = carved(block, false) {
        carved.usable
    } else {
        // SAFETY: per the contract.
        unsafe { mi::mi_usable_size(block) }
    }
}

/// jemalloc's "what would `malloc(size)` really give": redis sizes buffers with it.
///
/// # Safety
/// None beyond the C function's (it touches no memory).
#[no_mangle]
pub unsafe extern "C" fn nallocx(size: usize, _flags: i32) -> usize {
    // SAFETY: a size computation.
    unsafe { mi::mi_good_size(size) }
}
