//! Forks of the pager's own process whose children may still read the device: each
//! fork's end-of-file pipe (its write end kept only by the child and its forks,
//! close-on-exec) and the hold on the zones the child may read (`program.rs`).

use std::os::fd::RawFd;
use std::sync::Mutex;

use znswap_pager_core::ForkHold;

#[derive(Default)]
pub(super) struct Forks {
    live: Mutex<Live>,
}

#[derive(Default)]
struct Live {
    /// Each fork's end-of-file pipe and its hold.
    forks: Vec<(RawFd, ForkHold)>,
    /// A thread watches them.
    watcher: bool,
}

impl Forks {
    /// A fork to watch; whether a watcher is to be started for it (none runs).
    pub(super) fn add(&self, eof: RawFd, hold: ForkHold) -> bool {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.forks.push((eof, hold));
        !std::mem::replace(&mut live.watcher, true)
    }

    /// The pipes to watch; `None` when none is left, and the watcher ends (the next
    /// fork starts another).
    pub(super) fn watched(&self) -> Option<Vec<RawFd>> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if live.forks.is_empty() {
            live.watcher = false;
            return None;
        }
        Some(live.forks.iter().map(|(fd, _)| *fd).collect())
    }

    /// The holds of the forks whose pipes `ended` (their descriptors closed).
    pub(super) fn take_ended(&self, ended: &[RawFd]) -> Vec<ForkHold> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let (gone, kept): (Vec<_>, Vec<_>) = live.forks.drain(..).partition(|(fd, _)| ended.contains(fd));
        live.forks = kept;
        gone.into_iter()
            .map(|(fd, hold)| {
                // SAFETY: our own descriptor, no longer watched.
                unsafe { libc::close(fd) };
                hold
            })
            .collect()
    }
}
