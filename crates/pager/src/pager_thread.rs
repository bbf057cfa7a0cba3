//! The pager's own threads, started with `pthread_create` rather than std's spawn.
//!
//! Under `znswap run` the program's `malloc` is the paged heap, and a pager thread may
//! allocate only once `PagerConfig::thread_start` has marked it as the pager's. std's
//! spawn runs its spawn hooks in the new thread before the closure, and they register
//! a thread-local destructor, which glibc records with `calloc`: into paged memory
//! when the pager is already running. The first touch of that block is a fault only
//! the pager's threads can serve, and a fault handler thread waits for itself (seen in
//! CI: every handler stuck in mimalloc's `_mi_theap_create`, once in about a hundred
//! runs, when a thread started after the launcher had switched the heap on). A raw
//! thread runs `thread_start` as its first code, before anything can allocate.
//!
//! Each thread gets a stack of its own, mapped here: glibc would hand it the cached
//! stack of an exited thread of the program, whose thread-local block (DTV) the
//! program's `malloc` put in paged memory (seen: redis's BGSAVE child stuck in
//! `pthread_create`).

use std::cell::Cell;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe, PanicHookInfo};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Once;

const STACK_BYTES: usize = 2 << 20;
const GUARD_BYTES: usize = 4096;

/// A running pager thread; [`PagerThread::join`] waits for it and frees its stack.
/// Dropped without a join, it runs on (detached) and its stack stays mapped.
pub struct PagerThread {
    thread: libc::pthread_t,
    /// The stack mapping's address (an integer: the handle is shared freely, and only
    /// `join` unmaps it).
    stack: usize,
}

struct Start {
    thread_start: Option<fn()>,
    role: &'static str,
    body: Box<dyn FnOnce() + Send>,
}

impl PagerThread {
    /// Starts `body` on a new thread named `name` (cut to the kernel's 15 bytes), after
    /// `thread_start`. A panic in `body` aborts the process: a pager thread gone leaves
    /// faulting threads blocked forever and paged memory with no owner (the kernel
    /// would BUG); `role` names it in the message.
    pub fn spawn(
        name: &str,
        role: &'static str,
        thread_start: Option<fn()>,
        body: impl FnOnce() + Send + 'static,
    ) -> io::Result<PagerThread> {
        install_panic_hook();
        // System calls, not libc's names: under `znswap run` those are the preload's
        // wrappers, and a stack must never be paged memory.
        // SAFETY: a fresh private mapping; the guard page at its low end (stacks grow
        // down) turns an overflow into SIGSEGV rather than a write into other memory.
        let stack = unsafe {
            let stack = libc::syscall(
                libc::SYS_mmap,
                std::ptr::null_mut::<libc::c_void>(),
                STACK_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            ) as *mut libc::c_void;
            if stack == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_mprotect, stack, GUARD_BYTES, libc::PROT_NONE) != 0 {
                let error = io::Error::last_os_error();
                unmap_stack(stack as usize);
                return Err(error);
            }
            stack
        };
        let start = Box::into_raw(Box::new(Start { thread_start, role, body: Box::new(body) }));
        let mut thread: libc::pthread_t = 0;
        // SAFETY: attributes initialised before use and destroyed after; the stack is
        // ours and outlives the thread (`join` unmaps it after the thread ends);
        // `start` passes to the thread, or back to us if it was not created.
        let rc = unsafe {
            let mut attributes: libc::pthread_attr_t = std::mem::zeroed();
            libc::pthread_attr_init(&mut attributes);
            libc::pthread_attr_setstack(&mut attributes, stack, STACK_BYTES);
            let rc = libc::pthread_create(&mut thread, &attributes, run, start.cast());
            libc::pthread_attr_destroy(&mut attributes);
            rc
        };
        if rc != 0 {
            // SAFETY: the thread was not created: `start` and the stack are still ours.
            unsafe {
                drop(Box::from_raw(start));
                unmap_stack(stack as usize);
            }
            return Err(io::Error::from_raw_os_error(rc));
        }
        let mut bytes: Vec<u8> = name.bytes().filter(|&byte| byte != 0).take(15).collect();
        bytes.push(0);
        // SAFETY: a live thread and a NUL-terminated name of at most 16 bytes. A name is
        // only a label (ps, gdb): a failure is ignored.
        unsafe { libc::pthread_setname_np(thread, bytes.as_ptr().cast()) };
        Ok(PagerThread { thread, stack: stack as usize })
    }

    /// Waits for the thread to return, then frees its stack.
    pub fn join(self) {
        // SAFETY: joined once (`self` is consumed); its stack is unused once it ended.
        unsafe {
            libc::pthread_join(self.thread, std::ptr::null_mut());
            unmap_stack(self.stack);
        }
    }
}

/// # Safety
/// `stack` is a stack `spawn` mapped, and no thread runs on it.
unsafe fn unmap_stack(stack: usize) {
    libc::syscall(libc::SYS_munmap, stack, STACK_BYTES);
}

thread_local! {
    /// This thread's role, if it is a pager thread (`run`).
    static PAGER_ROLE: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// A panic hook that reports a pager thread's panic without reading the environment,
/// and hands every other thread's to the hook it replaced. std's default hook reads
/// `RUST_BACKTRACE` with `getenv`, and a program may have moved its environment into
/// paged memory (redis does, for its process title): a pager thread that panics while
/// it holds the state lock then faults on a page only that lock's holder can bring back,
/// and hangs with its message unsaid (seen: redis stuck, no panic in its log).
fn install_panic_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
            if let Some(role) = PAGER_ROLE.with(Cell::get) {
                eprintln!("znswap: the pager's {role} panicked: {info}");
            } else {
                previous(info);
            }
        }));
    });
}

extern "C" fn run(start: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: the box `spawn` leaked for this thread, taken once.
    let start = unsafe { Box::from_raw(start.cast::<Start>()) };
    // Before anything that could allocate (the box is freed only after the mark).
    if let Some(mark) = start.thread_start {
        mark();
    }
    let Start { role, body, .. } = *start;
    PAGER_ROLE.with(|pager| pager.set(Some(role)));
    if catch_unwind(AssertUnwindSafe(body)).is_err() {
        eprintln!("znswap: the pager's {role} failed; aborting rather than hanging or losing pages");
        std::process::abort();
    }
    std::ptr::null_mut()
}

/// Pager threads whose faults are told apart ([`PagerTids`]); more go unmarked.
const PAGER_TIDS_MAX: usize = 16;

/// The pager's own threads (thread ids, 0: a free entry), so that a fault one of them
/// raises is known as such (`Fault::from_pager_thread`).
#[derive(Default)]
pub(crate) struct PagerTids {
    tids: [AtomicU32; PAGER_TIDS_MAX],
}

impl PagerTids {
    /// Notes the calling thread as one of the pager's.
    pub(crate) fn note_this_thread(&self) {
        let tid = crate::sys::gettid();
        for entry in &self.tids {
            if entry.compare_exchange(0, tid, Relaxed, Relaxed).is_ok() {
                return;
            }
        }
    }

    /// Whether thread `tid` (0: the kernel did not say) is one of the pager's.
    pub(crate) fn contains(&self, tid: u32) -> bool {
        tid != 0 && self.tids.iter().any(|entry| entry.load(Relaxed) == tid)
    }

    /// A forked child runs none of the parent's threads (and its own ids may come back).
    pub(crate) fn forget(&self) {
        for entry in &self.tids {
            entry.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PagerThread;
    use std::cell::Cell;
    use std::sync::mpsc;

    thread_local! {
        static MARKED: Cell<bool> = const { Cell::new(false) };
    }

    fn mark() {
        MARKED.with(|marked| marked.set(true));
    }

    #[test]
    fn the_body_runs_marked_on_a_named_thread() {
        let (go, named) = mpsc::channel::<()>();
        let (report, seen) = mpsc::channel();
        let thread = PagerThread::spawn("znswap-test-thread-long-name", "test thread", Some(mark), move || {
            // `spawn` names the thread before it returns, and the test sends after that.
            named.recv().unwrap();
            let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
            report.send((MARKED.with(Cell::get), comm.trim().to_string())).unwrap();
        })
        .unwrap();
        go.send(()).unwrap();
        let (marked, name) = seen.recv().unwrap();
        thread.join();
        assert!(marked, "the body ran on a thread thread_start had not marked");
        assert_eq!(name, "znswap-test-thr", "the name is cut to the kernel's 15 bytes");
        assert!(!MARKED.with(Cell::get), "thread_start ran on the spawning thread");
    }
}
