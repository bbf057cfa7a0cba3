//! Reads that wait by polling: a thread that opts in (`poll_reads_on_this_thread`)
//! submits its O_DIRECT reads through an io_uring of its own and polls for the
//! completion, yielding the CPU to any other runnable thread between looks, instead of
//! sleeping in `pread`.
//!
//! Why: a page fault served by a pager thread waits on two wake-ups where the kernel's
//! own swap-in waits on one: the device's completion wakes the pager thread, whose
//! install wakes the faulting thread. In a virtual machine without guest halt polling
//! (`haltpoll.guest_halt_poll_ns=0`) each wake-up of a halted vCPU costs a round trip
//! through the host. A thread that polls never halts its vCPU, so the first wake-up is
//! gone, and a 4 KiB read's median falls with it (docs/measurements/2026-11-pager.md,
//! 2026-11-26). The price is the CPU the poll takes while the read is in flight, which
//! `sched_yield` hands to any other runnable thread.
//!
//! Why io_uring and not a hand-rolled AIO: `pread` cannot be polled, and io_uring with
//! `DEFER_TASKRUN` completes a read only when its thread asks (`GETEVENTS`), so the
//! completion costs no interrupt of the polling thread. Where io_uring is refused (an
//! old kernel, a seccomp filter) the read falls back to `pread`, once for the thread.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};

/// A read still in flight after this long is waited for asleep: polling pays only while
/// it is shorter than a wake-up, and a device that slow is not saved by it.
const POLL_FOR: Duration = Duration::from_millis(2);

thread_local! {
    static POLLER: RefCell<Poller> = const { RefCell::new(Poller::Off) };
    static PAUSED: Cell<bool> = const { Cell::new(false) };
    static POLLED: Cell<u64> = const { Cell::new(0) };
    static POLLED_WAIT_NS: Cell<u64> = const { Cell::new(0) };
}

enum Poller {
    Off,
    /// Opted in; the ring is made on the first read.
    Wanted,
    /// The ring, and the process that made it (a fork's child must not use its parent's
    /// ring: the queues are shared memory).
    Ready {
        ring: IoUring,
        pid: u32,
    },
    /// io_uring was refused here: `pread` from now on.
    Refused,
}

/// Makes this thread's O_DIRECT reads wait by polling (`true`) or asleep (`false`, the
/// default). For threads whose reads someone is waiting on, such as a pager's fault
/// handlers; see the module's comment for what it costs.
pub fn poll_reads_on_this_thread(on: bool) {
    POLLER.with(|poller| {
        *poller.borrow_mut() = if on { Poller::Wanted } else { Poller::Off };
    });
}

/// Makes this thread's reads wait asleep for now (`true`), or by polling again
/// (`false`), its ring kept: for a thread that polls only while a CPU would otherwise
/// be idle. A thread that does not poll (`poll_reads_on_this_thread(false)`) is not
/// changed by it.
pub fn pause_polled_reads_on_this_thread(paused: bool) {
    PAUSED.with(|cell| cell.set(paused));
}

/// Reads this thread has made by polling (a thread where io_uring was refused makes
/// none).
pub fn polled_reads_on_this_thread() -> u64 {
    POLLED.with(Cell::get)
}

/// Nanoseconds this thread has spent polling for its reads' completions (the CPU the
/// polling took; a wait that went on asleep counts up to when it did).
pub fn polled_read_wait_ns_on_this_thread() -> u64 {
    POLLED_WAIT_NS.with(Cell::get)
}

/// Fills `data` (aligned for O_DIRECT) from `position` by a polled read, or returns
/// `None` if this thread does not poll (the caller then reads as usual).
pub(crate) fn read_at(file: &File, data: &mut [u8], position: u64) -> Option<std::io::Result<()>> {
    if PAUSED.with(Cell::get) {
        return None;
    }
    POLLER.with(|poller| {
        let mut poller = poller.borrow_mut();
        let pid = std::process::id();
        match &*poller {
            Poller::Off | Poller::Refused => return None,
            Poller::Ready { pid: made_by, .. } if *made_by == pid => {}
            Poller::Wanted | Poller::Ready { .. } => {
                let made = IoUring::builder().setup_single_issuer().setup_defer_taskrun().setup_taskrun_flag().build(4);
                *poller = match made {
                    Ok(ring) => Poller::Ready { ring, pid },
                    Err(_) => Poller::Refused,
                };
            }
        }
        let Poller::Ready { ring, .. } = &mut *poller else { return None };
        let polled = read_polled(ring, file, data, position);
        match polled {
            Some(_) => POLLED.with(|polled| polled.set(polled.get() + 1)),
            // Nothing in flight: the ring can go.
            None => *poller = Poller::Refused,
        }
        polled
    })
}

/// The read, by polling, in pieces if it comes back short (the end of a file, as
/// `read_exact_at` continues). `None`: io_uring failed before a piece was in flight (the
/// caller gives the ring up and reads with `pread`; pieces already read are read again).
/// Never returns while a piece is in flight: the device writes into `data` until its
/// completion is reaped, so every wait for it is retried until it is.
fn read_polled(ring: &mut IoUring, file: &File, data: &mut [u8], position: u64) -> Option<std::io::Result<()>> {
    let mut done = 0usize;
    while done < data.len() {
        let rest = &mut data[done..];
        let read = opcode::Read::new(types::Fd(file.as_raw_fd()), rest.as_mut_ptr(), rest.len() as u32)
            .offset(position + done as u64)
            .build();
        // SAFETY: `rest` stays borrowed until the read's completion is reaped below.
        unsafe { ring.submission().push(&read) }.expect("a submission queue entry free (one read at a time)");
        loop {
            match ring.submit() {
                Ok(submitted) if submitted > 0 => break,
                Err(error) if matches!(error.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)) => {}
                // Not submitted (the entry is still queued): the caller drops the ring.
                _ => return None,
            }
        }
        let started = Instant::now();
        let mut asleep = false;
        let result = loop {
            // The kernel flags a deferred completion in shared memory; `submit` then
            // enters with GETEVENTS, which runs it (no system call while none is there).
            // A failed enter (a signal) is simply tried again.
            if ring.submission().taskrun() {
                let _ = ring.submit();
            }
            if let Some(completion) = ring.completion().next() {
                break completion.result();
            }
            if started.elapsed() > POLL_FOR {
                asleep = true;
                let _ = ring.submit_and_wait(1);
            } else {
                // SAFETY: no arguments; gives the CPU to another runnable thread, if any.
                unsafe { libc::sched_yield() };
            }
        };
        let polled = if asleep { POLL_FOR } else { started.elapsed() };
        POLLED_WAIT_NS.with(|ns| ns.set(ns.get() + polled.as_nanos() as u64));
        match result {
            read if read > 0 => done += read as usize,
            0 => return Some(Err(std::io::ErrorKind::UnexpectedEof.into())),
            error if error == -libc::EINTR || error == -libc::EAGAIN => {}
            error => return Some(Err(std::io::Error::from_raw_os_error(-error))),
        }
    }
    Some(Ok(()))
}
