//! Co-location: the program thread that takes nearly all the faults shares one CPU with
//! the fault handlers, and the evictor and I/O threads keep to the others.
//!
//! A fault is a round trip between two threads: the faulting thread blocks, a handler
//! reads the device and wakes it. On different CPUs each leg is a wake-up of another
//! CPU, an inter-processor interrupt and, in a virtual machine whose idle CPUs halt, a
//! VM exit and the host's wake-up of that virtual CPU; the scheduler puts a woken thread
//! on an idle CPU, so left alone the two drift apart. On one CPU the legs are context
//! switches, and the program runs faster on less CPU. The handlers pinned alone gained
//! nothing (the scheduler put the program's thread on the other CPU), and the kernel's
//! swap pinned the same way did worse (figures: docs/measurements/2026-11-pager.md).
//!
//! Only a thread that takes nine in ten faults (redis's, a Python interpreter's) is
//! pinned, and only if it may run on two CPUs or more (a thread the program pinned is
//! left alone); released when its share falls below three in four, its CPU set given
//! back. A forked child gets the set back at once (`restore_after_fork`): redis's
//! BGSAVE child must not share its parent's CPU; so does a program the pinned thread
//! starts (`before_spawn`), and a thread it starts, at the next tick (`free_inheritors`).

use std::sync::Mutex;

/// Program threads counted per window; faults of others count only in the total.
const TRACKED: usize = 8;
/// A window with fewer faults says nothing: the program is not fault-bound now.
const WINDOW_FAULTS_MIN: u32 = 200;
/// Shares, in percent, to pin a thread and to release it (hysteresis).
const PIN_SHARE: u32 = 90;
const RELEASE_SHARE: u32 = 75;

/// Faults per program thread since the last tick.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Window {
    threads: [(u32, u32); TRACKED],
    faults: u32,
}

impl Window {
    fn count(&mut self, tid: u32) {
        self.faults += 1;
        for slot in &mut self.threads {
            if slot.0 == tid {
                slot.1 += 1;
                return;
            }
            if slot.0 == 0 {
                *slot = (tid, 1);
                return;
            }
        }
    }

    /// The thread with most faults, and its share in percent.
    fn leader(&self) -> Option<(u32, u32)> {
        let &(tid, faults) = self.threads.iter().filter(|slot| slot.0 != 0).max_by_key(|slot| slot.1)?;
        Some((tid, faults * 100 / self.faults.max(1)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    Keep,
    Pin { tid: u32 },
    Release,
}

/// What a tick does, given the thread pinned now (if any) and the window's faults.
pub(super) fn decide(pinned: Option<u32>, window: &Window) -> Decision {
    if window.faults < WINDOW_FAULTS_MIN {
        return Decision::Keep;
    }
    let Some((tid, share)) = window.leader() else { return Decision::Keep };
    match pinned {
        Some(current) if current == tid && share >= RELEASE_SHARE => Decision::Keep,
        // Another thread took over.
        Some(_) if share >= PIN_SHARE => Decision::Pin { tid },
        // The pinned thread's share fell, or no thread leads enough to take its place.
        Some(_) => Decision::Release,
        None if share >= PIN_SHARE => Decision::Pin { tid },
        None => Decision::Keep,
    }
}

/// A CPU set, as `sched_setaffinity` takes it.
#[derive(Clone, Copy)]
struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    fn of(tid: i32) -> Option<CpuSet> {
        // SAFETY: a zeroed cpu_set_t is valid; the kernel fills at most its size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            (libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0).then_some(CpuSet(set))
        }
    }

    fn only(cpu: usize) -> CpuSet {
        // SAFETY: as above; CPU_SET stays within the set (checked by the caller's
        // `contains`, which only holds for CPUs within it).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            CpuSet(set)
        }
    }

    fn contains(&self, cpu: usize) -> bool {
        // SAFETY: reads one bit of the set, within its size.
        cpu < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(cpu, &self.0) }
    }

    fn count(&self) -> u32 {
        // SAFETY: reads the set.
        unsafe { libc::CPU_COUNT(&self.0) as u32 }
    }

    fn without(mut self, cpu: usize) -> CpuSet {
        // SAFETY: clears one bit of our own set.
        unsafe { libc::CPU_CLR(cpu, &mut self.0) };
        self
    }

    /// Applies the set to `tid`; a thread gone meanwhile is no error.
    fn apply(&self, tid: i32) {
        // SAFETY: a valid set of the size given.
        unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
    }
}

/// The threads of thread `tid`'s process (any process: thread ids are the kernel's,
/// and `/proc/TID` is a thread's whole process).
fn threads(tid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{tid}/task")) else { return Vec::new() };
    entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// The CPU thread `tid` last ran on (`/proc/TID/stat`, field 39).
fn last_cpu(tid: u32) -> Option<usize> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after its end.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(39 - 3)?.parse().ok()
}

struct Pinned {
    tid: u32,
    cpu: usize,
    /// Its CPU set before, given back on release (and to forked children).
    saved: CpuSet,
    /// The process's threads when it was pinned: one of them on that CPU alone was
    /// pinned by the program, a later one inherited the pin (`free_inheritors`).
    before: Vec<i32>,
}

/// The co-location state of a pager: its threads, the window, what is pinned.
#[derive(Default)]
pub(super) struct Colocation {
    enabled: bool,
    /// (The faulting threads may be of any process the pager serves: the pinning works
    /// across processes:
    /// `sched_setaffinity` takes any thread id the caller may act on).
    window: Mutex<Window>,
    /// The pager's threads by kind (thread ids): fault handlers, and the rest.
    handlers: Mutex<Vec<i32>>,
    background: Mutex<Vec<i32>>,
    pinned: Mutex<Option<Pinned>>,
}

impl Colocation {
    pub(super) fn new(enabled: bool) -> Colocation {
        Colocation { enabled, ..Colocation::default() }
    }

    /// A pager thread of `role` started (called on that thread).
    pub(super) fn register(&self, handler: bool) {
        if !self.enabled {
            return;
        }
        // SAFETY: no arguments.
        let tid = unsafe { libc::gettid() };
        let list = if handler { &self.handlers } else { &self.background };
        list.lock().unwrap_or_else(|p| p.into_inner()).push(tid);
    }

    /// A fault of program thread `tid` (0: the kernel did not say).
    pub(super) fn count(&self, tid: u32) {
        if tid != 0 && self.enabled {
            self.window.lock().unwrap_or_else(|p| p.into_inner()).count(tid);
        }
    }

    /// Pins or releases as the last window's faults say; called every 100 ms or so.
    pub(super) fn tick(&self) {
        if !self.enabled {
            return;
        }
        let window = std::mem::take(&mut *self.window.lock().unwrap_or_else(|p| p.into_inner()));
        let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        match decide(pinned.as_ref().map(|p| p.tid), &window) {
            Decision::Keep => {
                if let Some(pinned) = pinned.as_ref() {
                    self.free_inheritors(pinned);
                }
            }
            Decision::Release => self.release(&mut pinned),
            Decision::Pin { tid } => {
                self.release(&mut pinned);
                *pinned = self.pin(tid);
            }
        }
    }

    fn pin(&self, tid: u32) -> Option<Pinned> {
        let saved = CpuSet::of(tid as i32)?;
        let cpu = last_cpu(tid)?;
        if saved.count() < 2 || !saved.contains(cpu) {
            return None;
        }
        let here = CpuSet::only(cpu);
        here.apply(tid as i32);
        for &handler in self.handlers.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            here.apply(handler);
        }
        let rest = saved.without(cpu);
        for &thread in self.background.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            rest.apply(thread);
        }
        Some(Pinned { tid, cpu, saved, before: threads(tid) })
    }

    /// Threads the pinned one started since (a thread inherits its creator's CPU set):
    /// given the CPUs back, so a pool the program starts while one thread takes the
    /// faults is not confined with it.
    fn free_inheritors(&self, pinned: &Pinned) {
        let handlers = self.handlers.lock().unwrap_or_else(|p| p.into_inner());
        let background = self.background.lock().unwrap_or_else(|p| p.into_inner());
        for thread in threads(pinned.tid) {
            let ours = thread as u32 == pinned.tid || handlers.contains(&thread) || background.contains(&thread);
            if ours || pinned.before.contains(&thread) {
                continue;
            }
            if CpuSet::of(thread).is_some_and(|set| set.count() == 1 && set.contains(pinned.cpu)) {
                pinned.saved.apply(thread);
            }
        }
    }

    fn release(&self, pinned: &mut Option<Pinned>) {
        let Some(released) = pinned.take() else { return };
        self.free_inheritors(&released);
        let Pinned { tid, saved, .. } = released;
        saved.apply(tid as i32);
        let handlers = self.handlers.lock().unwrap_or_else(|p| p.into_inner());
        let background = self.background.lock().unwrap_or_else(|p| p.into_inner());
        for &thread in handlers.iter().chain(background.iter()) {
            saved.apply(thread);
        }
    }

    /// In a forked child (its only thread): the CPU set the pinned thread had, so the
    /// child does not share its parent's CPU. Never waits (another thread may have held
    /// the lock at the fork).
    pub(super) fn restore_after_fork(&self) {
        if let Ok(pinned) = self.pinned.try_lock() {
            if let Some(Pinned { saved, .. }) = pinned.as_ref() {
                saved.apply(0);
            }
        }
    }

    /// Before the calling thread starts another program (`execve`, `posix_spawn`,
    /// `system`, a `vfork` child's exec): it gets the CPU set the pinned thread had, so
    /// the program started does not inherit the pin; if it is the pinned thread itself,
    /// the pin is released (the next tick pins it again if it still takes the faults).
    /// Never waits, and in a `vfork` child writes no memory but the kernel's.
    pub(super) fn before_spawn(&self) {
        if !self.enabled {
            return;
        }
        let Ok(mut pinned) = self.pinned.try_lock() else { return };
        let Some(Pinned { tid, saved, .. }) = pinned.as_ref() else { return };
        saved.apply(0);
        // SAFETY: no arguments.
        if *tid == unsafe { libc::gettid() } as u32 {
            self.release(&mut pinned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{decide, last_cpu, Colocation, CpuSet, Decision, Window};

    fn window(faults: &[(u32, u32)]) -> Window {
        let mut window = Window::default();
        for &(tid, count) in faults {
            for _ in 0..count {
                window.count(tid);
            }
        }
        window
    }

    /// A thread is pinned at nine in ten faults, kept down to three in four, released
    /// below; a quiet window changes nothing; another thread's takeover moves the pin.
    #[test]
    fn the_thread_that_takes_the_faults_is_pinned_with_hysteresis() {
        assert_eq!(decide(None, &window(&[(7, 950), (8, 50)])), Decision::Pin { tid: 7 });
        assert_eq!(decide(None, &window(&[(7, 800), (8, 200)])), Decision::Keep, "80 %: not yet");
        assert_eq!(decide(Some(7), &window(&[(7, 800), (8, 200)])), Decision::Keep, "80 %: kept");
        assert_eq!(decide(Some(7), &window(&[(7, 600), (8, 400)])), Decision::Release);
        assert_eq!(decide(Some(7), &window(&[(7, 50), (8, 950)])), Decision::Pin { tid: 8 });
        assert_eq!(decide(Some(7), &window(&[(7, 10), (8, 20)])), Decision::Keep, "too few faults");
        assert_eq!(decide(None, &window(&[])), Decision::Keep);
        // Faults of more threads than are tracked count in the total only.
        let many: Vec<(u32, u32)> = (1..=20).map(|tid| (tid, 50)).collect();
        assert_eq!(decide(None, &window(&many)), Decision::Keep);
    }

    /// A thread started by the pinned thread inherits its one CPU; the next tick gives
    /// it the CPUs back, and the release gives the pinned thread its own.
    #[test]
    fn threads_the_pinned_thread_starts_get_the_cpus_back() {
        // SAFETY: no arguments.
        let tid = unsafe { libc::gettid() };
        let all = CpuSet::of(tid).unwrap();
        if all.count() < 2 {
            eprintln!("one CPU: nothing to pin");
            return;
        }
        let colocation = Colocation::new(true);
        let pinned = colocation.pin(tid as u32).expect("pinned");
        assert_eq!(CpuSet::of(tid).unwrap().count(), 1, "the thread is pinned");
        let (report, reported) = std::sync::mpsc::channel();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let child = std::thread::spawn(move || {
            // SAFETY: no arguments.
            report.send(unsafe { libc::gettid() }).unwrap();
            wait.recv().unwrap();
        });
        let child_tid = reported.recv().unwrap();
        assert_eq!(CpuSet::of(child_tid).unwrap().count(), 1, "it inherited the pin");
        colocation.free_inheritors(&pinned);
        assert_eq!(CpuSet::of(child_tid).unwrap().count(), all.count(), "given the CPUs back");
        colocation.release(&mut Some(pinned));
        assert_eq!(CpuSet::of(tid).unwrap().count(), all.count(), "released");
        done.send(()).unwrap();
        child.join().unwrap();
    }

    /// The calling thread's last CPU is one it may run on.
    #[test]
    fn a_threads_last_cpu_is_read() {
        // SAFETY: no arguments.
        let tid = unsafe { libc::gettid() } as u32;
        let cpu = last_cpu(tid).expect("this thread's CPU");
        assert!(CpuSet::of(tid as i32).expect("this thread's set").contains(cpu), "CPU {cpu}");
    }
}
