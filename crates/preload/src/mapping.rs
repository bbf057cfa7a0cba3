//! Anonymous private mappings the program makes itself (`mmap`: CPython's object
//! arenas, large buffers), paged like its heap. Each is a page-aligned block of the
//! paged heap, discarded as it is handed out (a fresh mapping reads zero, and costs no
//! slot until written), and `munmap`, `mremap` and `MAP_FIXED` keep the semantics of
//! plain anonymous memory over it:
//!
//! - `munmap` of part of a mapping discards that part (its slots freed, nothing written
//!   back); once every page of a mapping is unmapped, its block goes back to the heap.
//!   One difference a correct program never sees: a touch of the unmapped part reads
//!   zero where the kernel would raise `SIGSEGV` (made `PROT_NONE`, its pages could not
//!   be read to swap them out, which zero-fill around a fault may have mapped).
//! - `mremap` shrinks by unmapping the tail; it grows only by moving (`MREMAP_MAYMOVE`):
//!   a new mapping, the bytes copied, the old range unmapped. The kernel moves page
//!   tables instead of copying; the copy costs time in proportion to the size, never
//!   correctness. Without `MREMAP_MAYMOVE` growing fails with `ENOMEM`, which the
//!   kernel also returns when the next pages are taken.
//! - `MAP_FIXED` anonymous memory over a mapping zeroes that range.
//!
//! What cannot be given those semantics is refused with a message naming it (a file or
//! shared mapping placed over paged memory, `MREMAP_FIXED`/`MREMAP_DONTUNMAP` of it, an
//! `munmap` of the malloc heap, `mprotect` to no access), and every other mapping (files, shared, executable,
//! `PROT_NONE` reservations, stacks) goes to the kernel as it is, outside the pager.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

use libmimalloc_sys as mi;
use znswap_pager::PAGE_BYTES;

use crate::alloc::{self, Internal};
use crate::say::say;

/// A paged mapping: its block of the heap, and the ranges of it the program unmapped.
pub(crate) struct Mapping {
    len: u64,
    /// Unmapped `[start, end)` ranges, sorted and disjoint.
    holes: Vec<(u64, u64)>,
    /// The program changed the protection of some of it (`mprotect`), which a move by
    /// `mremap` could not carry over.
    reprotected: bool,
}

impl Mapping {
    fn unmapped_bytes(&self) -> u64 {
        self.holes.iter().map(|(start, end)| end - start).sum()
    }

    /// Adds `[start, end)` to the holes, merging neighbours.
    fn add_hole(&mut self, start: u64, end: u64) {
        self.holes.push((start, end));
        self.holes.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.holes.len());
        for &(start, end) in &self.holes {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        self.holes = merged;
    }

    /// Removes `[start, end)` from the holes (mapped again).
    fn fill_hole(&mut self, start: u64, end: u64) {
        let mut kept = Vec::with_capacity(self.holes.len() + 1);
        for &(hole_start, hole_end) in &self.holes {
            if hole_end <= start || hole_start >= end {
                kept.push((hole_start, hole_end));
                continue;
            }
            if hole_start < start {
                kept.push((hole_start, start));
            }
            if hole_end > end {
                kept.push((end, hole_end));
            }
        }
        self.holes = kept;
    }

    fn overlaps_hole(&self, start: u64, end: u64) -> bool {
        self.holes.iter().any(|&(hole_start, hole_end)| hole_start < end && hole_end > start)
    }
}

/// The paged mappings by start address: the mapping table. First in the lock order
/// (`znswap_pager_core`'s crate docs): held while this library allocates from the heap,
/// touches paged memory (a fault, which the pager's handler threads serve) and calls the
/// pager (`program_discard`, `fork`, which take the pager's locks); so the pager's own
/// threads never take it (asserted in [`table`]). The fork wrapper holds it across the
/// fork, so a child never inherits it taken.
static MAPPING_TABLE: Mutex<BTreeMap<u64, Mapping>> = Mutex::new(BTreeMap::new());

/// Program mappings served from paged memory, and the bytes they hold now.
pub(crate) static MMAPS_PAGED: AtomicU64 = AtomicU64::new(0);
pub(crate) static MAPPED_BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set while this thread holds the mapping table: a signal handler or a
    /// `pthread_atfork` handler (the fork wrapper holds the table across `fork`) that maps
    /// memory must not wait for its own thread.
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// The mapping table, taken; `None` if this thread already holds it (a nested call).
/// A pager thread never takes it: holders fault on paged memory, which only the pager's
/// threads serve, so one of them waiting here could wait for itself.
pub(crate) fn table() -> Option<Table> {
    if alloc::is_pager_thread() {
        say!("znswap run: a pager thread reached for the program's mapping table; stopping rather than deadlocking");
        std::process::abort();
    }
    if HOLDING.with(|holding| holding.replace(true)) {
        return None;
    }
    Some(Table(MAPPING_TABLE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())))
}

pub(crate) struct Table(MutexGuard<'static, BTreeMap<u64, Mapping>>);

impl Drop for Table {
    fn drop(&mut self) {
        HOLDING.with(|holding| holding.set(false));
    }
}

impl std::ops::Deref for Table {
    type Target = BTreeMap<u64, Mapping>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Table {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// A nested call (from a handler on a thread in the middle of one) cannot change paged
/// mappings: refused with a message rather than a deadlock.
fn nested(what: &str) {
    say!(
        "znswap run: {what} of paged memory from a signal or fork handler that interrupted another is not \
         supported; refused"
    );
}

const PAGE: u64 = PAGE_BYTES as u64;

fn page_up(len: u64) -> Option<u64> {
    len.checked_add(PAGE - 1).map(|len| len & !(PAGE - 1))
}

fn fail<T>(errno: i32, value: T) -> T {
    alloc::set_errno(errno);
    value
}

/// The kernel's `mmap`, for what is not paged.
///
/// # Safety
/// As the C function (a `MAP_FIXED` mapping replaces what was there).
unsafe fn kernel_mmap(addr: *mut c_void, len: usize, prot: i32, flags: i32, fd: i32, offset: i64) -> *mut c_void {
    // SAFETY: per the contract: the caller's own call, as it was made.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, offset) as *mut c_void }
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: i64,
) -> *mut c_void {
    // SAFETY: per the contract.
    unsafe { map(addr, len, prot, flags, fd, offset) }
}

/// The same call under its large-file name (one symbol on 64-bit Linux).
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: i64,
) -> *mut c_void {
    // SAFETY: per the contract.
    unsafe { map(addr, len, prot, flags, fd, offset) }
}

/// Flags a paged mapping may carry: plain private anonymous memory (`MAP_NORESERVE` and
/// `MAP_POPULATE` change nothing a program can see).
const PLAIN_FLAGS: i32 = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_POPULATE;

/// The bits of `mmap`'s flags that give the mapping's type (shared, private, ...).
const MAP_TYPE: i32 = 0x0f;

fn is_plain_anonymous(prot: i32, flags: i32) -> bool {
    prot == libc::PROT_READ | libc::PROT_WRITE
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & MAP_TYPE == libc::MAP_PRIVATE
}

/// `mmap`: plain private anonymous memory from the paged heap, the rest from the kernel.
///
/// # Safety
/// As the C function.
unsafe fn map(addr: *mut c_void, len: usize, prot: i32, flags: i32, fd: i32, offset: i64) -> *mut c_void {
    // SAFETY: the caller's own call, passed to the kernel as it was made.
    let kernel = || unsafe { kernel_mmap(addr, len, prot, flags, fd, offset) };
    let Some(runtime) = crate::RUNTIME.get() else { return kernel() };
    let heap = alloc::PAGED_HEAP.load(Relaxed);
    if heap.is_null() || alloc::is_internal_thread() {
        return kernel();
    }
    let start = addr as u64;
    if flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) != 0 {
        if !crate::overlaps_arena(start, len as u64) {
            return kernel();
        }
        let _internal = Internal::enter();
        return map_fixed_over_paged(runtime, start, len as u64, prot, flags);
    }
    let paged = is_plain_anonymous(prot, flags) && flags & !PLAIN_FLAGS == 0 && len > 0;
    let Some(len_pages) = page_up(len as u64).filter(|_| paged) else { return kernel() };
    let _internal = Internal::enter();
    // Nested in a call that holds the table: the kernel's memory, outside the pager.
    let Some(mut mappings) = table() else { return kernel() };
    match new_mapping(runtime, heap, &mut mappings, len_pages) {
        Some(start) => start as *mut c_void,
        // The arena is full: the kernel's memory, outside the pager (reported as not
        // covered in the summary).
        None => kernel(),
    }
}

/// A block of the paged heap for a new mapping of `len` bytes (whole pages), reading
/// zero: `None` when the arena has no room.
fn new_mapping(
    runtime: &crate::Runtime,
    heap: *mut mi::mi_heap_t,
    mappings: &mut BTreeMap<u64, Mapping>,
    len: u64,
) -> Option<u64> {
    // SAFETY: an allocation from the paged heap (live for the process's life).
    let block = unsafe { mi::mi_heap_malloc_aligned(heap, len as usize, PAGE_BYTES) };
    if block.is_null() {
        return None;
    }
    let start = block as u64;
    // Whatever the heap held there before reads zero now, and has no slots.
    if runtime.program_discard(start, len) != 0 {
        // SAFETY: the block just allocated, not handed out.
        unsafe { mi::mi_free(block) };
        return None;
    }
    mappings.insert(start, Mapping { len, holes: Vec::new(), reprotected: false });
    MMAPS_PAGED.fetch_add(1, Relaxed);
    MAPPED_BYTES.fetch_add(len, Relaxed);
    Some(start)
}

/// `MAP_FIXED` over paged memory: fresh anonymous memory over part of a paged mapping
/// reads zero there; anything else would replace the heap under the pager's feet.
fn map_fixed_over_paged(runtime: &crate::Runtime, start: u64, len: u64, prot: i32, flags: i32) -> *mut c_void {
    if flags & libc::MAP_FIXED_NOREPLACE != 0 {
        return fail(libc::EEXIST, libc::MAP_FAILED);
    }
    let end = match page_up(len).and_then(|len| start.checked_add(len).filter(|_| len > 0)) {
        Some(end) if start % PAGE == 0 => end,
        _ => return fail(libc::EINVAL, libc::MAP_FAILED),
    };
    let Some(mut mappings) = table() else {
        nested("mmap(MAP_FIXED)");
        return fail(libc::ENOMEM, libc::MAP_FAILED);
    };
    let within = mapping_at(&mappings, start).filter(|&(base, mapping)| end <= base + mapping.len);
    let Some((base, _)) =
        within.filter(|_| is_plain_anonymous(prot, flags) && flags & !PLAIN_FLAGS & !libc::MAP_FIXED == 0)
    else {
        drop(mappings);
        say!(
            "znswap run: mmap(MAP_FIXED) at {start:#x} over the program's paged memory is not supported \
             (only private anonymous read-write memory over one of its own mappings is); run the program without znswap"
        );
        return fail(libc::ENOMEM, libc::MAP_FAILED);
    };
    // Fresh memory is read-write whatever the program made this range before.
    read_write(start, end);
    if runtime.program_discard(start, end - start) != 0 {
        return fail(libc::ENOMEM, libc::MAP_FAILED);
    }
    if let Some(mapping) = mappings.get_mut(&base) {
        mapping.fill_hole(start, end);
    }
    start as *mut c_void
}

/// Makes `[start, end)` of a paged mapping read-write again (after the program's
/// `mprotect`): an unmapped range goes back to the heap, which writes to it.
fn read_write(start: u64, end: u64) {
    // SAFETY: a protection change of paged memory the caller knows to be a paged
    // mapping's; read-write is what the heap and the pager expect of it.
    unsafe { libc::syscall(libc::SYS_mprotect, start, end - start, libc::PROT_READ | libc::PROT_WRITE) };
}

/// The mapping whose block holds `address`, with its start.
fn mapping_at(mappings: &BTreeMap<u64, Mapping>, address: u64) -> Option<(u64, &Mapping)> {
    let (&base, mapping) = mappings.range(..=address).next_back()?;
    (address < base + mapping.len).then_some((base, mapping))
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> i32 {
    let start = addr as u64;
    let Some(runtime) = crate::RUNTIME.get().filter(|_| crate::overlaps_arena(start, len as u64)) else {
        // SAFETY: the caller's own call, as it was made.
        return unsafe { libc::syscall(libc::SYS_munmap, addr, len) as i32 };
    };
    let end = match page_up(len as u64) {
        Some(len) if start % PAGE == 0 && len > 0 => start.saturating_add(len),
        _ => return fail(libc::EINVAL, -1),
    };
    let _internal = Internal::enter();
    let (arena_start, arena_end) = crate::arena_bounds();
    let inner = (start.max(arena_start), end.min(arena_end));
    let Some(mut mappings) = table() else {
        nested("munmap");
        return fail(libc::EAGAIN, -1);
    };
    if !covered_by_mappings(&mappings, inner.0, inner.1) {
        drop(mappings);
        say!(
            "znswap run: munmap({start:#x}, {len}) would unmap part of the program's malloc heap, which znswap \
             pages; refused (EINVAL)"
        );
        return fail(libc::EINVAL, -1);
    }
    // SAFETY: the parts of the caller's range outside the paged arena, unmapped as it
    // asked.
    unsafe {
        if start < arena_start {
            libc::syscall(libc::SYS_munmap, start, arena_start - start);
        }
        if end > arena_end {
            libc::syscall(libc::SYS_munmap, arena_end, end - arena_end);
        }
    }
    unmap(runtime, &mut mappings, inner.0, inner.1);
    0
}

/// Whether every page of `[start, end)` belongs to a paged mapping (mapped or not).
fn covered_by_mappings(mappings: &BTreeMap<u64, Mapping>, start: u64, end: u64) -> bool {
    let mut at = start;
    while at < end {
        match mapping_at(mappings, at) {
            Some((base, mapping)) => at = base + mapping.len,
            None => return false,
        }
    }
    true
}

/// Unmaps `[start, end)`, which paged mappings cover: discarded; a mapping unmapped
/// whole goes back to the heap.
fn unmap(runtime: &crate::Runtime, mappings: &mut BTreeMap<u64, Mapping>, start: u64, end: u64) {
    let mut at = start;
    while at < end {
        let Some((base, len)) = mapping_at(mappings, at).map(|(base, mapping)| (base, mapping.len)) else {
            // Not (or no longer) a paged mapping: nothing of ours to unmap here.
            at += PAGE;
            continue;
        };
        let piece_end = end.min(base + len);
        // Read-write again (the heap writes to what it gets back), then discarded: the
        // slots freed, nothing written back.
        read_write(at, piece_end);
        runtime.program_discard(at, piece_end - at);
        let Some(mapping) = mappings.get_mut(&base) else { break };
        mapping.add_hole(at, piece_end);
        if mapping.unmapped_bytes() == len {
            mappings.remove(&base);
            MAPPED_BYTES.fetch_sub(len, Relaxed);
            // SAFETY: the block `new_mapping` allocated for this mapping, now unmapped
            // whole by the program and gone from the table.
            unsafe { mi::mi_free(base as *mut c_void) };
        }
        at = piece_end;
    }
}

/// Protection changes inside paged memory: any protection that can be read goes to the
/// kernel (a JIT's read-write then read-execute code, a read-only table): the pager
/// still reads those pages to swap them out, and maps runs of pages VMA by VMA
/// (`Userfaultfd::copy_pages`). Without read access (`PROT_NONE` guard pages) the pager
/// could not write a page out, so that is refused with a message: the program would
/// otherwise lose its data or stop the pager.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: usize, prot: i32) -> i32 {
    let paged = crate::RUNTIME.get().is_some() && crate::overlaps_arena(addr as u64, len as u64);
    if !paged || alloc::is_internal_thread() {
        // SAFETY: the caller's own call, as it was made.
        return unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) as i32 };
    }
    if prot & libc::PROT_READ != 0 {
        if prot != libc::PROT_READ | libc::PROT_WRITE {
            let _internal = Internal::enter();
            if let Some(mut mappings) = table() {
                let start = addr as u64;
                let end = start.saturating_add(len as u64);
                let touched: Vec<u64> = mappings
                    .range(..end)
                    .rev()
                    .take_while(|(&base, m)| base + m.len > start)
                    .map(|(&base, _)| base)
                    .collect();
                for base in touched {
                    if let Some(mapping) = mappings.get_mut(&base) {
                        mapping.reprotected = true;
                    }
                }
            }
        }
        // SAFETY: the caller's own call, as it was made (readable: the pager can still
        // read the pages to swap them out).
        return unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) as i32 };
    }
    say!(
        "znswap run: mprotect({addr:p}, {len}, {prot:#x}) of the program's paged memory is not supported: znswap \
         must read a page to swap it out (a guard page of a mapping the program made itself?); refused (EACCES): \
         run this program without znswap"
    );
    fail(libc::EACCES, -1)
}

/// `mremap`'s fifth argument (`new_address`) is read only with `MREMAP_FIXED`, as the
/// kernel does; a caller that passes four arguments leaves it unread.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: i32,
    new_address: *mut c_void,
) -> *mut c_void {
    let start = old as u64;
    let fixed = flags & libc::MREMAP_FIXED != 0;
    let runtime = crate::RUNTIME.get();
    let from_paged = runtime.is_some() && crate::overlaps_arena(start, old_len.max(1) as u64);
    let into_paged = runtime.is_some() && fixed && crate::overlaps_arena(new_address as u64, new_len as u64);
    let (Some(runtime), true) = (runtime, from_paged || into_paged) else {
        // SAFETY: the caller's own call, as it was made.
        return unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_address) as *mut c_void };
    };
    let _internal = Internal::enter();
    if fixed || flags & libc::MREMAP_DONTUNMAP != 0 || !from_paged {
        say!(
            "znswap run: mremap({start:#x}, {old_len}, {new_len}, {flags:#x}) with a fixed target or \
             MREMAP_DONTUNMAP over the program's paged memory is not supported; refused (EINVAL)"
        );
        return fail(libc::EINVAL, libc::MAP_FAILED);
    }
    let (old_len, new_len) = match (page_up(old_len as u64), page_up(new_len as u64)) {
        (Some(old_len), Some(new_len)) if start % PAGE == 0 && old_len > 0 && new_len > 0 => (old_len, new_len),
        _ => return fail(libc::EINVAL, libc::MAP_FAILED),
    };
    let Some(old_end) = start.checked_add(old_len) else { return fail(libc::EINVAL, libc::MAP_FAILED) };
    let Some(mut mappings) = table() else {
        nested("mremap");
        return fail(libc::EAGAIN, libc::MAP_FAILED);
    };
    let Some((_, mapping)) = mapping_at(&mappings, start)
        .filter(|(base, mapping)| old_end <= base + mapping.len && !mapping.overlaps_hole(start, old_end))
    else {
        // What the kernel says of an old range that is not mapped whole.
        return fail(libc::EFAULT, libc::MAP_FAILED);
    };
    let reprotected = mapping.reprotected;
    if new_len <= old_len {
        if new_len < old_len {
            unmap(runtime, &mut mappings, start + new_len, old_end);
        }
        return old;
    }
    if flags & libc::MREMAP_MAYMOVE == 0 {
        return fail(libc::ENOMEM, libc::MAP_FAILED);
    }
    if reprotected {
        drop(mappings);
        say!(
            "znswap run: mremap growing a paged mapping whose protection the program changed (mprotect) is not \
             supported (the move would not keep the protection); refused (ENOMEM)"
        );
        return fail(libc::ENOMEM, libc::MAP_FAILED);
    }
    let heap = alloc::PAGED_HEAP.load(Relaxed);
    let Some(moved) = new_mapping(runtime, heap, &mut mappings, new_len) else {
        return fail(libc::ENOMEM, libc::MAP_FAILED);
    };
    // Copied without the lock: the faults it takes may be slow, and other threads'
    // mappings need not wait for them.
    drop(mappings);
    // SAFETY: the old range is mapped whole (checked above) and the new block is ours,
    // `new_len > old_len` bytes; a program that unmaps the old range meanwhile from
    // another thread races with its own mremap, as it would under the kernel.
    unsafe { std::ptr::copy_nonoverlapping(start as *const u8, moved as *mut u8, old_len as usize) };
    // (If another thread unmapped the old range meanwhile, what is gone is skipped.)
    if let Some(mut mappings) = table() {
        unmap(runtime, &mut mappings, start, old_end);
    }
    moved as *mut c_void
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_merge_and_split() {
        let mut mapping = Mapping { len: 10 * PAGE, holes: Vec::new(), reprotected: false };
        mapping.add_hole(2 * PAGE, 4 * PAGE);
        mapping.add_hole(4 * PAGE, 5 * PAGE);
        mapping.add_hole(7 * PAGE, 8 * PAGE);
        assert_eq!(mapping.holes, vec![(2 * PAGE, 5 * PAGE), (7 * PAGE, 8 * PAGE)]);
        assert_eq!(mapping.unmapped_bytes(), 4 * PAGE);
        assert!(mapping.overlaps_hole(4 * PAGE, 6 * PAGE));
        assert!(!mapping.overlaps_hole(5 * PAGE, 7 * PAGE));
        mapping.fill_hole(3 * PAGE, 8 * PAGE);
        assert_eq!(mapping.holes, vec![(2 * PAGE, 3 * PAGE)]);
        mapping.add_hole(0, 10 * PAGE);
        assert_eq!(mapping.unmapped_bytes(), mapping.len);
    }

    #[test]
    fn only_plain_private_anonymous_read_write_memory_is_paged() {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let private = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        assert!(is_plain_anonymous(rw, private));
        assert!(!is_plain_anonymous(rw, libc::MAP_SHARED | libc::MAP_ANONYMOUS));
        assert!(!is_plain_anonymous(libc::PROT_NONE, private));
        assert!(!is_plain_anonymous(rw | libc::PROT_EXEC, private));
        assert!(!is_plain_anonymous(rw, libc::MAP_PRIVATE));
    }
}
