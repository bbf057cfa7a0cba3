//! What programs do to their memory beyond malloc, given the semantics of plain
//! anonymous memory over the paged heap.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::alloc::Internal;
use crate::say::say;

pub(crate) static MLOCKS_IGNORED: AtomicU64 = AtomicU64::new(0);
static MLOCK_WARNED: AtomicBool = AtomicBool::new(false);

fn mlock_ignored(what: &str) {
    MLOCKS_IGNORED.fetch_add(1, Relaxed);
    if !MLOCK_WARNED.swap(true, Relaxed) {
        say!("znswap run: {what} ignored: the heap is paged by znswap, and locking it would pin the whole arena");
    }
}

/// `mlockall` would fault in the whole reserved arena: neutralised (the program runs
/// as if its memory were locked, which under a budget it cannot be).
///
/// # Safety
/// As the C function (this one touches no memory).
#[no_mangle]
pub unsafe extern "C" fn mlockall(_flags: i32) -> i32 {
    mlock_ignored("mlockall");
    0
}

/// # Safety
/// As the C function (this one touches no memory).
#[no_mangle]
pub unsafe extern "C" fn munlockall() -> i32 {
    0
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mlock(address: *const libc::c_void, len: usize) -> i32 {
    if crate::overlaps_arena(address as u64, len as u64) {
        mlock_ignored("mlock of the paged heap");
        return 0;
    }
    // SAFETY: the caller's own call, passed to the kernel as it was made.
    unsafe { libc::syscall(libc::SYS_mlock, address, len) as i32 }
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn mlock2(address: *const libc::c_void, len: usize, flags: u32) -> i32 {
    if crate::overlaps_arena(address as u64, len as u64) {
        mlock_ignored("mlock2 of the paged heap");
        return 0;
    }
    // SAFETY: the caller's own call, passed to the kernel as it was made.
    unsafe { libc::syscall(libc::SYS_mlock2, address, len, flags) as i32 }
}

/// `madvise` over the paged heap keeps the semantics of anonymous memory: a discard
/// reads back zero and frees its slots (`Pager::program_discard`); transparent huge
/// pages are refused (they would fault and swap 2 MiB at a time). Elsewhere, as is.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn madvise(address: *mut libc::c_void, len: usize, advice: i32) -> i32 {
    const MADV_DONTNEED_LOCKED: i32 = 24;
    const MADV_COLLAPSE: i32 = 25;
    let start = address as u64;
    // SAFETY: the caller's own call, passed to the kernel as it was made.
    let kernel = || unsafe { libc::syscall(libc::SYS_madvise, address, len, advice) as i32 };
    let Some(runtime) = crate::RUNTIME.get().filter(|_| crate::overlaps_arena(start, len as u64)) else {
        return kernel();
    };
    match advice {
        libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE | MADV_DONTNEED_LOCKED => {
            if crate::alloc::is_internal_thread() {
                // The arena is pinned for mimalloc, and the pager's threads never touch
                // it: a discard from one would be a bug that loses the program's data.
                say!(
                    "znswap run: a pager thread discarded paged memory at {start:#x}; stopping rather than losing data"
                );
                std::process::abort();
            }
            let _internal = Internal::enter();
            runtime.program_discard(start, len as u64)
        }
        libc::MADV_HUGEPAGE | MADV_COLLAPSE => 0,
        // A forked child keeps the whole arena: a hole in it would fault its heap (and
        // free() into the hole) with nothing there. Keeping the copy is what a child
        // that never touches it sees anyway.
        libc::MADV_DONTFORK | libc::MADV_DOFORK | libc::MADV_KEEPONFORK => 0,
        libc::MADV_WIPEONFORK => {
            say!("znswap run: madvise(MADV_WIPEONFORK) of paged memory is not supported; refused (EINVAL)");
            crate::alloc::set_errno(libc::EINVAL);
            -1
        }
        _ => kernel(),
    }
}

pub(crate) static FORKS: AtomicU64 = AtomicU64::new(0);

/// The C library's function `name`, found past this library; `None` (with errno
/// `ENOSYS`) if there is none.
fn next_symbol(name: &std::ffi::CStr) -> Option<*mut libc::c_void> {
    // SAFETY: a symbol lookup with a NUL-terminated name.
    let symbol = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if symbol.is_null() {
        say!("znswap run: the C library has no {name:?} after the preload library");
        crate::alloc::set_errno(libc::ENOSYS);
        return None;
    }
    Some(symbol)
}

/// The C library's `fork`; -1 (`ENOSYS`) if it has none.
///
/// # Safety
/// As `fork()` in a threaded program: the child may rely only on the calling thread.
unsafe fn real_fork() -> libc::pid_t {
    static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut real = REAL.load(Relaxed);
    if real == 0 {
        let Some(symbol) = next_symbol(c"fork") else { return -1 };
        real = symbol as usize;
        REAL.store(real, Relaxed);
    }
    // SAFETY: `real` is the C library's `fork`, whose signature this is.
    let real: extern "C" fn() -> libc::pid_t =
        unsafe { std::mem::transmute::<usize, extern "C" fn() -> libc::pid_t>(real) };
    real()
}

/// A forked child sees its memory exactly as at the fork, pages on the device
/// included (`Pager::fork`): redis's BGSAVE child writes the snapshot it forked.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    // SAFETY: the program's own fork, as it asked.
    let Some(runtime) = crate::RUNTIME.get() else { return unsafe { real_fork() } };
    let _internal = Internal::enter();
    let heap = crate::alloc::PAGED_HEAP.load(Relaxed);
    let Some(pager) = runtime.pager() else {
        let Some(served) = runtime.served() else { unreachable!("paged here or served") };
        // The daemon keeps where the heap's swapped pages are for the child, this
        // process's drops and discards held until the fork is done.
        let mut forking = served.fork_begin();
        let table = crate::mapping::table();
        let carved = crate::alloc::carved_table();
        // SAFETY: the program's own fork, in the calling thread; the child relies only
        // on this thread until it has a server of its own (`Served::in_child`).
        let pid = unsafe { real_fork() };
        if pid == 0 {
            crate::alloc::PAGED_HEAP.store(std::ptr::null_mut(), Relaxed);
        }
        drop(carved);
        drop(table);
        if pid == 0 {
            served.in_child(&mut forking);
            // (The child's copies of the locks, let go: its own forks take them.)
            drop(forking);
            crate::alloc::PAGED_HEAP.store(heap, Relaxed);
        } else {
            served.fork_end(forking, pid);
            if pid > 0 {
                FORKS.fetch_add(1, Relaxed);
            }
        }
        return pid;
    };
    // No other thread is changing the program's mappings at the fork: the child gets
    // the table whole and unlocked.
    let table = crate::mapping::table();
    // A leaf lock the child's frees may need.
    let carved = crate::alloc::carved_table();
    // SAFETY: the program's own fork, in the calling thread, with the pager's locks held
    // across it; the child relies only on this thread until the call returns.
    let pid = unsafe {
        pager.fork(|| {
            let pid = real_fork();
            if pid == 0 {
                // In the child, its fault thread starts up before it can mark itself: no
                // allocation goes to paged memory until it serves faults.
                crate::alloc::PAGED_HEAP.store(std::ptr::null_mut(), Relaxed);
            }
            pid
        })
    };
    drop(carved);
    drop(table);
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
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn daemon(nochdir: i32, noclose: i32) -> i32 {
    if crate::RUNTIME.get().is_none() {
        let Some(real) = next_symbol(c"daemon") else { return -1 };
        // SAFETY: `real` is the C library's `daemon`, whose signature this is.
        let real: extern "C" fn(i32, i32) -> i32 =
            unsafe { std::mem::transmute::<*mut libc::c_void, extern "C" fn(i32, i32) -> i32>(real) };
        return real(nochdir, noclose);
    }
    say!(
        "znswap run: the program asked to become a daemon; znswap pages a program only in the foreground \
         (run it without its daemon option)"
    );
    crate::alloc::set_errno(libc::ENOTSUP);
    -1
}

/// `_exit` (and `_Exit`) end the process without its exit handlers: the figures are
/// written first, so the launcher's summary has them (Python's `os._exit`, a server's
/// fast shutdown). Only the process that started the pager writes them, so a forked
/// child's `_exit` (or a `vfork` child's) changes nothing.
///
/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: i32) -> ! {
    crate::at_exit();
    // SAFETY: ends the process as the program asked (what the C library's `_exit` does).
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable_exit()
}

/// # Safety
/// As `_exit`.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: i32) -> ! {
    // SAFETY: as `_exit`.
    unsafe { _exit(status) }
}

/// `exit_group` does not return; the C library loops too, should it ever.
fn unreachable_exit() -> ! {
    loop {
        std::hint::spin_loop();
    }
}

type Argv = *const *const libc::c_char;
type Execve = unsafe extern "C" fn(*const libc::c_char, Argv, Argv) -> i32;
type Execv = unsafe extern "C" fn(*const libc::c_char, Argv) -> i32;
type PosixSpawn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const libc::c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    Argv,
    Argv,
) -> i32;
type System = unsafe extern "C" fn(*const libc::c_char) -> i32;

/// The C library functions that start another program, found once at start-up (a
/// `vfork` child must not look them up: `dlsym` may allocate).
pub(crate) struct Spawners {
    execve: Option<Execve>,
    execv: Option<Execv>,
    execvp: Option<Execv>,
    execvpe: Option<Execve>,
    posix_spawn: Option<PosixSpawn>,
    posix_spawnp: Option<PosixSpawn>,
    system: Option<System>,
}

static SPAWNERS: std::sync::OnceLock<Spawners> = std::sync::OnceLock::new();

/// Looks the spawners up: at start-up, before the program runs (and at a first spawn
/// if the library never started).
pub(crate) fn find_spawners() -> &'static Spawners {
    SPAWNERS.get_or_init(|| {
        let find = |name: &std::ffi::CStr| next_symbol(name).map_or(0, |symbol| symbol as usize);
        // SAFETY: each symbol is the C library's function of that name, whose C
        // signature the type spells; 0 (not found) is `None`.
        unsafe {
            Spawners {
                execve: std::mem::transmute::<usize, Option<Execve>>(find(c"execve")),
                execv: std::mem::transmute::<usize, Option<Execv>>(find(c"execv")),
                execvp: std::mem::transmute::<usize, Option<Execv>>(find(c"execvp")),
                execvpe: std::mem::transmute::<usize, Option<Execve>>(find(c"execvpe")),
                posix_spawn: std::mem::transmute::<usize, Option<PosixSpawn>>(find(c"posix_spawn")),
                posix_spawnp: std::mem::transmute::<usize, Option<PosixSpawn>>(find(c"posix_spawnp")),
                system: std::mem::transmute::<usize, Option<System>>(find(c"system")),
            }
        }
    })
}

/// The C library's spawner `pick`, the co-location pin given back first
/// (`Pager::before_spawn`): a program started by a thread the pager pinned to one CPU
/// would otherwise run on that CPU alone. `None` (errno `ENOSYS`) if there is none.
fn spawner<F>(pick: impl FnOnce(&Spawners) -> Option<F>) -> Option<F> {
    if let Some(pager) = crate::RUNTIME.get().and_then(|runtime| runtime.pager()) {
        pager.before_spawn();
    }
    let real = pick(find_spawners());
    if real.is_none() {
        crate::alloc::set_errno(libc::ENOSYS);
    }
    real
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const libc::c_char, argv: Argv, envp: Argv) -> i32 {
    // SAFETY: the C library's function, with the caller's arguments.
    spawner(|s| s.execve).map_or(-1, |real| unsafe { real(path, argv, envp) })
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const libc::c_char, argv: Argv) -> i32 {
    // SAFETY: the C library's function, with the caller's arguments.
    spawner(|s| s.execv).map_or(-1, |real| unsafe { real(path, argv) })
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const libc::c_char, argv: Argv) -> i32 {
    // SAFETY: the C library's function, with the caller's arguments.
    spawner(|s| s.execvp).map_or(-1, |real| unsafe { real(file, argv) })
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const libc::c_char, argv: Argv, envp: Argv) -> i32 {
    // SAFETY: the C library's function, with the caller's arguments.
    spawner(|s| s.execvpe).map_or(-1, |real| unsafe { real(file, argv, envp) })
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attributes: *const libc::posix_spawnattr_t,
    argv: Argv,
    envp: Argv,
) -> i32 {
    // SAFETY: the C library's function, with the caller's arguments.
    spawner(|s| s.posix_spawn).map_or(libc::ENOSYS, |real| unsafe { real(pid, path, actions, attributes, argv, envp) })
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attributes: *const libc::posix_spawnattr_t,
    argv: Argv,
    envp: Argv,
) -> i32 {
    // SAFETY: the C library's function, with the caller's arguments.
    spawner(|s| s.posix_spawnp).map_or(libc::ENOSYS, |real| unsafe { real(pid, file, actions, attributes, argv, envp) })
}

/// # Safety
/// As the C function.
#[no_mangle]
pub unsafe extern "C" fn system(command: *const libc::c_char) -> i32 {
    // SAFETY: the C library's function, with the caller's arguments.
    spawner(|s| s.system).map_or(-1, |real| unsafe { real(command) })
}
