//! userfaultfd over `libc`: the few structures and ioctls the pager needs, from
//! `include/uapi/linux/userfaultfd.h`, with their sizes checked in tests.
//!
//! Faults arrive as [`Event`]s read from the descriptor (handler-thread mode), or as
//! SIGBUS in the faulting thread when [`features::SIGBUS`] is on (self-paging mode); both
//! are resolved with [`Userfaultfd::copy`], [`Userfaultfd::zeropage`] or
//! [`Userfaultfd::write_protect`].

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use znswap_pager_core::PAGE_BYTES;

/// `UFFD_API`: the only API version.
const UFFD_API: u64 = 0xAA;

/// `_IOC(dir, 0xAA, nr, size)`.
const fn uffd_ioctl(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
}
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;
const IOC_READ_WRITE: u64 = IOC_READ | IOC_WRITE;

const UFFDIO_API: u64 = uffd_ioctl(IOC_READ_WRITE, 0x3F, std::mem::size_of::<UffdioApi>());
const UFFDIO_REGISTER: u64 = uffd_ioctl(IOC_READ_WRITE, 0x00, std::mem::size_of::<UffdioRegister>());
const UFFDIO_UNREGISTER: u64 = uffd_ioctl(IOC_READ, 0x01, std::mem::size_of::<UffdioRange>());
const UFFDIO_WAKE: u64 = uffd_ioctl(IOC_READ, 0x02, std::mem::size_of::<UffdioRange>());
const UFFDIO_COPY: u64 = uffd_ioctl(IOC_READ_WRITE, 0x03, std::mem::size_of::<UffdioCopy>());
const UFFDIO_ZEROPAGE: u64 = uffd_ioctl(IOC_READ_WRITE, 0x04, std::mem::size_of::<UffdioZeropage>());
const UFFDIO_MOVE: u64 = uffd_ioctl(IOC_READ_WRITE, 0x05, std::mem::size_of::<UffdioMove>());
const UFFDIO_WRITEPROTECT: u64 = uffd_ioctl(IOC_READ_WRITE, 0x06, std::mem::size_of::<UffdioWriteprotect>());
const UFFDIO_POISON: u64 = uffd_ioctl(IOC_READ_WRITE, 0x08, std::mem::size_of::<UffdioPoison>());

/// `UFFD_FEATURE_*` bits.
pub mod features {
    pub const PAGEFAULT_FLAG_WP: u64 = 1 << 0;
    /// A fork's child keeps its registrations, on a new userfaultfd handed to the
    /// reader in [`Event::Fork`](super::Event::Fork); the fork waits until it is read.
    pub const EVENT_FORK: u64 = 1 << 1;
    pub const EVENT_REMOVE: u64 = 1 << 3;
    pub const EVENT_UNMAP: u64 = 1 << 6;
    /// Faults raise SIGBUS in the faulting thread instead of queueing an event.
    pub const SIGBUS: u64 = 1 << 7;
    pub const THREAD_ID: u64 = 1 << 8;
    pub const EXACT_ADDRESS: u64 = 1 << 11;
    pub const WP_UNPOPULATED: u64 = 1 << 13;
    /// `UFFDIO_POISON`: a resolved page that raises SIGBUS when touched.
    pub const POISON: u64 = 1 << 14;
    pub const WP_ASYNC: u64 = 1 << 15;
    pub const MOVE: u64 = 1 << 16;
}

/// `UFFDIO_REGISTER_MODE_*`.
pub mod register_mode {
    pub const MISSING: u64 = 1 << 0;
    pub const WP: u64 = 1 << 1;
}

const COPY_MODE_DONTWAKE: u64 = 1 << 0;
const COPY_MODE_WP: u64 = 1 << 1;
const ZEROPAGE_MODE_DONTWAKE: u64 = 1 << 0;
const WRITEPROTECT_MODE_WP: u64 = 1 << 0;
const WRITEPROTECT_MODE_DONTWAKE: u64 = 1 << 1;
const MOVE_MODE_DONTWAKE: u64 = 1 << 0;

const EVENT_PAGEFAULT: u8 = 0x12;
const EVENT_FORK: u8 = 0x13;
const EVENT_REMOVE: u8 = 0x15;
const EVENT_UNMAP: u8 = 0x16;
const PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
const PAGEFAULT_FLAG_WP: u64 = 1 << 1;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
struct UffdioZeropage {
    range: UffdioRange,
    mode: u64,
    zeropage: i64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

#[repr(C)]
struct UffdioPoison {
    range: UffdioRange,
    mode: u64,
    updated: i64,
}

#[repr(C)]
struct UffdioMove {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    moved: i64,
}

/// `struct uffd_msg`: an event byte, padding, then a 24-byte union.
#[repr(C)]
#[derive(Clone, Copy)]
struct UffdMsg {
    event: u8,
    reserved: [u8; 7],
    arg: [u64; 3],
}

/// What the kernel tells a handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// An access to a missing page (`write_protect` false) or a write to a
    /// write-protected one (`write_protect` true).
    PageFault {
        address: u64,
        write: bool,
        write_protect: bool,
        thread_id: u32,
    },
    /// `madvise(MADV_DONTNEED)` or similar dropped `start..end`.
    Remove {
        start: u64,
        end: u64,
    },
    Unmap {
        start: u64,
        end: u64,
    },
    /// The program forked (`features::EVENT_FORK`): `uffd` is the child's userfaultfd,
    /// a descriptor the reader now owns.
    Fork {
        uffd: RawFd,
    },
    Other {
        event: u8,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum UffdError {
    #[error("userfaultfd is unavailable: {0} (as non-root, `sysctl vm.unprivileged_userfaultfd=1`, or run as root)")]
    Unavailable(io::Error),
    #[error("the kernel lacks userfaultfd features {missing:#x} (needs Linux 6.x with UFFD_FEATURE_* {missing:#x})")]
    MissingFeatures { missing: u64 },
    #[error("{op} failed: {source}")]
    Ioctl { op: &'static str, source: io::Error },
}

impl UffdError {
    /// The errno of a failed ioctl.
    pub fn errno(&self) -> Option<i32> {
        match self {
            UffdError::Ioctl { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// A userfaultfd descriptor with its negotiated features.
pub struct Userfaultfd {
    fd: OwnedFd,
    features: u64,
}

impl Userfaultfd {
    /// Opens a userfaultfd (close-on-exec, non-blocking) with every `required` feature
    /// and whichever `optional` ones the kernel has; fails naming the missing required
    /// ones.
    pub fn new(required: u64, optional: u64) -> Result<Userfaultfd, UffdError> {
        let open = || -> Result<OwnedFd, UffdError> {
            // SAFETY: a plain system call returning a new descriptor or -1.
            let raw = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
            if raw < 0 {
                return Err(UffdError::Unavailable(io::Error::last_os_error()));
            }
            // SAFETY: `raw` is a descriptor we own from here on.
            Ok(unsafe { OwnedFd::from_raw_fd(raw as RawFd) })
        };
        // The API handshake happens once per descriptor: probe what exists on one, then
        // enable what we use on another.
        let probe = open()?;
        let mut api = UffdioApi { api: UFFD_API, features: 0, ioctls: 0 };
        ioctl(probe.as_raw_fd(), UFFDIO_API, &mut api)
            .map_err(|source| UffdError::Ioctl { op: "UFFDIO_API", source })?;
        let available = api.features;
        if required & !available != 0 {
            return Err(UffdError::MissingFeatures { missing: required & !available });
        }
        let fd = open()?;
        let mut api = UffdioApi { api: UFFD_API, features: required | (optional & available), ioctls: 0 };
        ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api).map_err(|source| UffdError::Ioctl { op: "UFFDIO_API", source })?;
        Ok(Userfaultfd { fd, features: api.features })
    }

    /// A userfaultfd received from another process (`SCM_RIGHTS`), whose handshake
    /// that process made with `features`: its ioctls act on the sender's address space.
    pub fn from_received(fd: OwnedFd, features: u64) -> Userfaultfd {
        Userfaultfd { fd, features }
    }

    pub fn features(&self) -> u64 {
        self.features
    }

    /// Registers `start..start+len` (page aligned) for `mode` faults.
    pub fn register(&self, start: u64, len: u64, mode: u64) -> Result<(), UffdError> {
        let mut register = UffdioRegister { range: UffdioRange { start, len }, mode, ioctls: 0 };
        ioctl(self.fd.as_raw_fd(), UFFDIO_REGISTER, &mut register)
            .map_err(|source| UffdError::Ioctl { op: "UFFDIO_REGISTER", source })
    }

    pub fn unregister(&self, start: u64, len: u64) -> Result<(), UffdError> {
        let mut range = UffdioRange { start, len };
        ioctl(self.fd.as_raw_fd(), UFFDIO_UNREGISTER, &mut range)
            .map_err(|source| UffdError::Ioctl { op: "UFFDIO_UNREGISTER", source })
    }

    /// Installs `source` (whole pages) at `destination`, write-protected if asked, and
    /// wakes the faulting threads unless `wake` is false. Returns `Ok(false)` if a page
    /// was already there (`EEXIST`: another thread resolved the fault first).
    pub fn copy(&self, destination: u64, source: &[u8], write_protect: bool, wake: bool) -> Result<bool, UffdError> {
        match self.copy_ioctl(destination, source, write_protect, wake).0 {
            Ok(()) => Ok(true),
            Err(error) if error.raw_os_error() == Some(libc::EEXIST) => Ok(false),
            Err(source) => Err(UffdError::Ioctl { op: "UFFDIO_COPY", source }),
        }
    }

    /// Copies `source` (whole pages) to `destination..` page by page; returns the bytes
    /// mapped, which stop short before the first page already mapped (so the caller
    /// knows exactly which pages are now present).
    pub fn copy_pages(
        &self,
        destination: u64,
        source: &[u8],
        write_protect: bool,
        wake: bool,
    ) -> Result<u64, UffdError> {
        match self.copy_ioctl(destination, source, write_protect, wake) {
            (Ok(()), _) => Ok(source.len() as u64),
            // A partial copy fails with EAGAIN, a first page already mapped with EEXIST;
            // `copied` holds the bytes mapped (or the negative errno when none were).
            (Err(error), copied) if matches!(error.raw_os_error(), Some(libc::EEXIST | libc::EAGAIN)) => {
                Ok(copied.max(0) as u64)
            }
            // The run crosses a VMA boundary (the program changed the protection of part
            // of a region): the kernel copies within one VMA only, and checks that before
            // copying anything. Page by page, each lands in its own VMA.
            (Err(error), _) if error.raw_os_error() == Some(libc::ENOENT) && source.len() > PAGE_BYTES => {
                let mut mapped = 0;
                for page in source.chunks(PAGE_BYTES) {
                    let landed = self.copy_pages(destination + mapped, page, write_protect, wake)?;
                    mapped += landed;
                    if landed < page.len() as u64 {
                        break;
                    }
                }
                Ok(mapped)
            }
            (Err(source), _) => Err(UffdError::Ioctl { op: "UFFDIO_COPY", source }),
        }
    }

    /// `UFFDIO_COPY`: the outcome and the kernel's `copy` field (bytes mapped, or -errno).
    fn copy_ioctl(&self, destination: u64, source: &[u8], write_protect: bool, wake: bool) -> (io::Result<()>, i64) {
        let mut mode = if wake { 0 } else { COPY_MODE_DONTWAKE };
        if write_protect {
            mode |= COPY_MODE_WP;
        }
        let mut copy =
            UffdioCopy { dst: destination, src: source.as_ptr() as u64, len: source.len() as u64, mode, copy: 0 };
        let result = ioctl(self.fd.as_raw_fd(), UFFDIO_COPY, &mut copy);
        (result, copy.copy)
    }

    /// Maps zero pages at `start..start+len`; `Ok(false)` if already mapped.
    pub fn zeropage(&self, start: u64, len: u64, wake: bool) -> Result<bool, UffdError> {
        let mode = if wake { 0 } else { ZEROPAGE_MODE_DONTWAKE };
        let mut zero = UffdioZeropage { range: UffdioRange { start, len }, mode, zeropage: 0 };
        match ioctl(self.fd.as_raw_fd(), UFFDIO_ZEROPAGE, &mut zero) {
            Ok(()) => Ok(true),
            Err(error) if error.raw_os_error() == Some(libc::EEXIST) => Ok(false),
            Err(source) => Err(UffdError::Ioctl { op: "UFFDIO_ZEROPAGE", source }),
        }
    }

    /// Sets (`protect`) or clears write protection on `start..start+len`; clearing it
    /// wakes threads blocked on a write-protect fault unless `wake` is false. (Setting it
    /// wakes nobody; the kernel refuses `DONTWAKE` with it, so `wake` is ignored then.)
    pub fn write_protect(&self, start: u64, len: u64, protect: bool, wake: bool) -> Result<(), UffdError> {
        let mode = match (protect, wake) {
            (true, _) => WRITEPROTECT_MODE_WP,
            (false, true) => 0,
            (false, false) => WRITEPROTECT_MODE_DONTWAKE,
        };
        let mut wp = UffdioWriteprotect { range: UffdioRange { start, len }, mode };
        ioctl(self.fd.as_raw_fd(), UFFDIO_WRITEPROTECT, &mut wp)
            .map_err(|source| UffdError::Ioctl { op: "UFFDIO_WRITEPROTECT", source })
    }

    /// Moves mapped pages from `source` to `destination` without copying (both
    /// registered). Returns bytes moved. A hole in the source is an error (`ENOENT`), not
    /// a page moved: with `UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES` the kernel counts holes as
    /// moved, and a pager that moved an empty page would believe it had its data.
    /// `EEXIST`: something is mapped at `destination`; `EBUSY`: the page is shared (a
    /// fork's child) or pinned.
    pub fn move_pages(&self, destination: u64, source: u64, len: u64, wake: bool) -> Result<u64, UffdError> {
        let mode = if wake { 0 } else { MOVE_MODE_DONTWAKE };
        let mut request = UffdioMove { dst: destination, src: source, len, mode, moved: 0 };
        ioctl(self.fd.as_raw_fd(), UFFDIO_MOVE, &mut request)
            .map_err(|source| UffdError::Ioctl { op: "UFFDIO_MOVE", source })?;
        Ok(request.moved.max(0) as u64)
    }

    /// Marks `start..start+len` poisoned: touching it raises SIGBUS (for pages whose only
    /// copy the device lost: never hand back silently wrong data).
    pub fn poison(&self, start: u64, len: u64) -> Result<(), UffdError> {
        let mut request = UffdioPoison { range: UffdioRange { start, len }, mode: 0, updated: 0 };
        ioctl(self.fd.as_raw_fd(), UFFDIO_POISON, &mut request)
            .map_err(|source| UffdError::Ioctl { op: "UFFDIO_POISON", source })
    }

    /// Wakes threads waiting on `start..start+len` (after a `DONTWAKE` resolution).
    pub fn wake(&self, start: u64, len: u64) -> Result<(), UffdError> {
        let mut range = UffdioRange { start, len };
        ioctl(self.fd.as_raw_fd(), UFFDIO_WAKE, &mut range)
            .map_err(|source| UffdError::Ioctl { op: "UFFDIO_WAKE", source })
    }

    /// Reads one pending event, or `None` if there is none (the descriptor is
    /// non-blocking; poll it first to wait).
    pub fn read_event(&self) -> io::Result<Option<Event>> {
        let mut message = UffdMsg { event: 0, reserved: [0; 7], arg: [0; 3] };
        // SAFETY: reading at most one message into a buffer of exactly its size.
        let read = unsafe {
            libc::read(self.fd.as_raw_fd(), (&mut message as *mut UffdMsg).cast(), std::mem::size_of::<UffdMsg>())
        };
        if read < 0 {
            let error = io::Error::last_os_error();
            return if error.raw_os_error() == Some(libc::EAGAIN) { Ok(None) } else { Err(error) };
        }
        assert_eq!(read as usize, std::mem::size_of::<UffdMsg>(), "userfaultfd reads whole messages");
        Ok(Some(match message.event {
            EVENT_PAGEFAULT => Event::PageFault {
                address: message.arg[1],
                write: message.arg[0] & PAGEFAULT_FLAG_WRITE != 0,
                write_protect: message.arg[0] & PAGEFAULT_FLAG_WP != 0,
                thread_id: message.arg[2] as u32,
            },
            EVENT_REMOVE => Event::Remove { start: message.arg[0], end: message.arg[1] },
            EVENT_UNMAP => Event::Unmap { start: message.arg[0], end: message.arg[1] },
            EVENT_FORK => Event::Fork { uffd: message.arg[0] as u32 as RawFd },
            event => Event::Other { event },
        }))
    }

    /// Waits up to `timeout_ms` for an event to be readable.
    pub fn poll(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut pollfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd, valid for the call.
        ready(unsafe { libc::poll(&mut pollfd, 1, timeout_ms) })
    }
}

/// What a wait's system call returned: whether something is readable. A signal for the
/// program that landed on this thread (EINTR) means nothing is, yet.
fn ready(returned: libc::c_int) -> io::Result<bool> {
    if returned < 0 {
        let error = io::Error::last_os_error();
        return if error.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(error) };
    }
    Ok(returned > 0)
}

/// One handler thread's wait for events: an epoll instance watching the userfaultfd with
/// `EPOLLEXCLUSIVE`, so an event wakes one waiting handler, not all of them. (`poll` on
/// the descriptor wakes every waiter; all but one then find nothing to read: with two
/// handler threads, a context switch per fault for nothing.)
pub struct Waiter {
    epoll: OwnedFd,
}

impl Waiter {
    pub fn new(uffd: &Userfaultfd) -> io::Result<Waiter> {
        // SAFETY: a plain system call returning a new descriptor or -1.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor we own from here on.
        let epoll = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut event = libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32, u64: 0 };
        // SAFETY: both descriptors are open; the event is read during the call only.
        if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, uffd.as_raw_fd(), &mut event) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Waiter { epoll })
    }

    /// An epoll instance watching nothing yet, for many handler threads to wait on
    /// together over many descriptors (`add`): the kernel wakes one waiter per event.
    pub fn empty() -> io::Result<Waiter> {
        // SAFETY: a plain system call returning a new descriptor or -1.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor we own from here on.
        Ok(Waiter { epoll: unsafe { OwnedFd::from_raw_fd(raw) } })
    }

    /// Watches `uffd` too (possibly while others wait).
    pub fn add(&self, uffd: &Userfaultfd) -> io::Result<()> {
        self.add_fd(std::os::fd::AsFd::as_fd(uffd))
    }

    /// Watches another descriptor for reading too (an event descriptor that wakes a
    /// handler for other work).
    pub fn add_fd(&self, fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 0 };
        // SAFETY: both descriptors are open; the event is read during the call only.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut event) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stops watching `uffd`. (Closing it would not do: another process may hold the
    /// same open file, which then stays watched.)
    pub fn remove(&self, uffd: &Userfaultfd) -> io::Result<()> {
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as above.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_DEL, uffd.as_raw_fd(), &mut event) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` for an event to be readable (perhaps taken by another
    /// handler by the time this one reads).
    pub fn wait(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: room for one event, valid for the call.
        ready(unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), &mut event, 1, timeout_ms) })
    }
}

impl AsRawFd for Userfaultfd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl std::os::fd::AsFd for Userfaultfd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn ioctl<T>(fd: RawFd, request: u64, argument: &mut T) -> io::Result<()> {
    // SAFETY: every request above is paired with the structure its number encodes.
    if unsafe { libc::ioctl(fd, request as _, argument as *mut T) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{
        features, register_mode, Event, UffdError, UffdMsg, UffdioApi, UffdioCopy, UffdioMove, UffdioPoison,
        UffdioRegister, UffdioWriteprotect, UffdioZeropage, Userfaultfd, Waiter, PAGE_BYTES, UFFDIO_API, UFFDIO_COPY,
        UFFDIO_MOVE, UFFDIO_POISON, UFFDIO_REGISTER, UFFDIO_UNREGISTER, UFFDIO_WAKE, UFFDIO_WRITEPROTECT,
        UFFDIO_ZEROPAGE,
    };
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn structures_match_the_kernel_abi() {
        assert_eq!(std::mem::size_of::<UffdioApi>(), 24);
        assert_eq!(std::mem::size_of::<UffdioRegister>(), 32);
        assert_eq!(std::mem::size_of::<UffdioCopy>(), 40);
        assert_eq!(std::mem::size_of::<UffdioZeropage>(), 32);
        assert_eq!(std::mem::size_of::<UffdioWriteprotect>(), 24);
        assert_eq!(std::mem::size_of::<UffdioMove>(), 40);
        assert_eq!(std::mem::size_of::<UffdioPoison>(), 32);
        assert_eq!(UFFDIO_POISON, 0xC020_AA08);
        assert_eq!(std::mem::size_of::<UffdMsg>(), 32);
        // The request numbers <linux/userfaultfd.h> expands to on x86-64.
        assert_eq!(UFFDIO_API, 0xC018_AA3F);
        assert_eq!(UFFDIO_REGISTER, 0xC020_AA00);
        assert_eq!(UFFDIO_UNREGISTER, 0x8010_AA01);
        assert_eq!(UFFDIO_WAKE, 0x8010_AA02);
        assert_eq!(UFFDIO_COPY, 0xC028_AA03);
        assert_eq!(UFFDIO_ZEROPAGE, 0xC020_AA04);
        assert_eq!(UFFDIO_MOVE, 0xC028_AA05);
        assert_eq!(UFFDIO_WRITEPROTECT, 0xC018_AA06);
    }

    struct Mapping {
        base: *mut u8,
        len: usize,
    }

    impl Mapping {
        fn new(pages: usize) -> Mapping {
            let len = pages * PAGE_BYTES;
            // SAFETY: a fresh anonymous private mapping, checked below.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            Mapping { base: base.cast(), len }
        }
        fn address(&self, page: usize) -> u64 {
            self.base as u64 + (page * PAGE_BYTES) as u64
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: unmapping our own mapping.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }

    /// Serves faults on `uffd` from another thread until `done`; missing pages get a page
    /// of `fill`, write-protect faults are resolved by clearing the protection.
    fn serve(uffd: &Userfaultfd, done: &AtomicBool, fill: u8, seen: &std::sync::Mutex<Vec<Event>>) {
        let page = vec![fill; PAGE_BYTES];
        while !done.load(Ordering::Acquire) {
            if !uffd.poll(10).unwrap() {
                continue;
            }
            while let Some(event) = uffd.read_event().unwrap() {
                seen.lock().unwrap().push(event);
                if let Event::PageFault { address, write_protect, .. } = event {
                    let page_start = address & !(PAGE_BYTES as u64 - 1);
                    if write_protect {
                        uffd.write_protect(page_start, PAGE_BYTES as u64, false, true).unwrap();
                    } else {
                        uffd.copy(page_start, &page, false, true).unwrap();
                    }
                }
            }
        }
    }

    /// An event wakes one waiting handler (`Waiter`), where `poll` wakes them all.
    #[test]
    fn a_fault_wakes_one_waiter() {
        let uffd = Userfaultfd::new(0, 0).expect("userfaultfd works here (vm.unprivileged_userfaultfd=1, or root)");
        let mapping = Mapping::new(1);
        uffd.register(mapping.address(0), mapping.len as u64, register_mode::MISSING).unwrap();
        let woken = std::sync::atomic::AtomicU32::new(0);
        let waiting = std::sync::Barrier::new(3);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    let waiter = Waiter::new(&uffd).unwrap();
                    waiting.wait();
                    // Nobody reads the event: a woken waiter just says so.
                    if waiter.wait(1000).unwrap() {
                        woken.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            waiting.wait();
            // Both are in epoll_wait by now, or soon: the fault comes after a pause.
            std::thread::sleep(std::time::Duration::from_millis(50));
            let address = mapping.address(0) as usize;
            let toucher = scope.spawn(move || {
                // SAFETY: reading our own mapping; the test maps the page below.
                unsafe { std::ptr::read_volatile(address as *const u8) }
            });
            std::thread::sleep(std::time::Duration::from_millis(1200));
            // The toucher blocks until the page is there (before any assertion, so a
            // failing one does not leave the scope waiting for it).
            while uffd.read_event().unwrap().is_none() {}
            assert!(uffd.zeropage(mapping.address(0), PAGE_BYTES as u64, true).unwrap());
            assert_eq!(toucher.join().unwrap(), 0);
        });
        assert_eq!(woken.load(Ordering::Relaxed), 1, "one waiter woken per event");
    }

    #[test]
    fn a_multi_page_copy_stops_before_a_mapped_page() {
        let uffd = Userfaultfd::new(0, 0).expect("userfaultfd works here (vm.unprivileged_userfaultfd=1, or root)");
        let mapping = Mapping::new(4);
        uffd.register(mapping.address(0), (4 * PAGE_BYTES) as u64, register_mode::MISSING).unwrap();
        assert!(uffd.copy(mapping.address(2), &[7u8; PAGE_BYTES], false, true).unwrap());
        let source = vec![9u8; 4 * PAGE_BYTES];
        assert_eq!(uffd.copy_pages(mapping.address(0), &source, false, true).unwrap(), 2 * PAGE_BYTES as u64);
        // SAFETY: pages 0..3 are mapped now; page 2 kept its first contents.
        let bytes = unsafe { std::slice::from_raw_parts(mapping.base, 3 * PAGE_BYTES) };
        assert!(bytes[..2 * PAGE_BYTES].iter().all(|&b| b == 9));
        assert!(bytes[2 * PAGE_BYTES..].iter().all(|&b| b == 7));
        assert_eq!(uffd.copy_pages(mapping.address(3), &source[..PAGE_BYTES], false, true).unwrap(), PAGE_BYTES as u64);
    }

    #[test]
    fn missing_faults_are_served_by_a_handler_thread() {
        let uffd = Userfaultfd::new(0, 0).expect("userfaultfd works here (vm.unprivileged_userfaultfd=1, or root)");
        let mapping = Mapping::new(4);
        uffd.register(mapping.address(0), mapping.len as u64, register_mode::MISSING).unwrap();
        let done = AtomicBool::new(false);
        let seen = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            scope.spawn(|| serve(&uffd, &done, 0x5A, &seen));
            // SAFETY: reading our own mapping; the handler fills the page first.
            let value = unsafe { std::ptr::read_volatile(mapping.base.add(2 * PAGE_BYTES + 7)) };
            assert_eq!(value, 0x5A);
            done.store(true, Ordering::Release);
        });
        let events = seen.lock().unwrap();
        assert!(
            matches!(events[0], Event::PageFault { address, write: false, write_protect: false, .. } if address & !(PAGE_BYTES as u64 - 1) == mapping.address(2))
        );
        // A page already present: copy reports it instead of failing.
        assert!(!uffd.copy(mapping.address(2), &[1; PAGE_BYTES], false, true).unwrap());
        assert!(uffd.zeropage(mapping.address(3), PAGE_BYTES as u64, true).unwrap());
        // SAFETY: reading a page we just zero-filled.
        assert_eq!(unsafe { std::ptr::read_volatile(mapping.base.add(3 * PAGE_BYTES)) }, 0);
    }

    #[test]
    fn a_write_to_a_protected_page_faults_once_protection_is_set() {
        let uffd = Userfaultfd::new(features::PAGEFAULT_FLAG_WP, 0).expect("write-protect support");
        let mapping = Mapping::new(2);
        uffd.register(mapping.address(0), mapping.len as u64, register_mode::MISSING | register_mode::WP).unwrap();
        // Install page 0 write-protected, as the pager does for a swapped-in clean page.
        assert!(uffd.copy(mapping.address(0), &[9; PAGE_BYTES], true, true).unwrap());
        // Protecting an already mapped page, as the evictor does, with either wake flag.
        uffd.write_protect(mapping.address(0), PAGE_BYTES as u64, true, false).unwrap();
        uffd.write_protect(mapping.address(0), PAGE_BYTES as u64, true, true).unwrap();
        let done = AtomicBool::new(false);
        let seen = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            scope.spawn(|| serve(&uffd, &done, 0, &seen));
            // SAFETY: reading then writing our own mapping; the write faults and the
            // handler lifts the protection before it completes.
            unsafe {
                assert_eq!(std::ptr::read_volatile(mapping.base), 9, "reads do not fault");
                std::ptr::write_volatile(mapping.base.add(1), 7);
                assert_eq!(std::ptr::read_volatile(mapping.base.add(1)), 7);
            }
            done.store(true, Ordering::Release);
        });
        let events = seen.lock().unwrap();
        assert_eq!(events.len(), 1, "exactly the write faulted: {events:?}");
        assert!(matches!(events[0], Event::PageFault { write: true, write_protect: true, .. }));
    }

    #[test]
    fn pages_move_without_copying() {
        let uffd = match Userfaultfd::new(features::MOVE, 0) {
            Ok(uffd) => uffd,
            Err(UffdError::MissingFeatures { .. }) => return, // kernels before 6.8
            Err(error) => panic!("{error}"),
        };
        let mapping = Mapping::new(4);
        uffd.register(mapping.address(0), mapping.len as u64, register_mode::MISSING).unwrap();
        assert!(uffd.copy(mapping.address(0), &[3; PAGE_BYTES], false, true).unwrap());
        let moved = uffd.move_pages(mapping.address(2), mapping.address(0), PAGE_BYTES as u64, true).unwrap();
        assert_eq!(moved, PAGE_BYTES as u64);
        // SAFETY: page 2 now holds the moved page.
        assert_eq!(unsafe { std::ptr::read_volatile(mapping.base.add(2 * PAGE_BYTES)) }, 3);
        // An empty source is reported, never counted as moved; a mapped destination too.
        let hole = uffd.move_pages(mapping.address(3), mapping.address(0), PAGE_BYTES as u64, true).unwrap_err();
        assert_eq!(hole.errno(), Some(libc::ENOENT), "{hole}");
        assert!(uffd.copy(mapping.address(0), &[4; PAGE_BYTES], false, true).unwrap());
        let occupied = uffd.move_pages(mapping.address(2), mapping.address(0), PAGE_BYTES as u64, true).unwrap_err();
        assert_eq!(occupied.errno(), Some(libc::EEXIST), "{occupied}");
    }

    /// With `WP_ASYNC` (which turns on `WP_UNPOPULATED`), protecting an empty entry leaves
    /// a write-protect marker: a zero page, a move or a poison marker cannot land there
    /// (`EEXIST`) until the protection is lifted, which drops the marker; a copy lands
    /// over it. The pager's fallbacks rest on this (`Shared::clear_wp_marker`).
    #[test]
    fn protecting_an_empty_page_asynchronously_leaves_a_marker() {
        let uffd = match Userfaultfd::new(features::WP_ASYNC | features::PAGEFAULT_FLAG_WP | features::MOVE, 0) {
            Ok(uffd) => uffd,
            Err(UffdError::MissingFeatures { .. }) => return, // kernels before 6.8
            Err(error) => panic!("{error}"),
        };
        let mapping = Mapping::new(4);
        let page = PAGE_BYTES as u64;
        uffd.register(mapping.address(0), mapping.len as u64, register_mode::MISSING | register_mode::WP).unwrap();
        uffd.write_protect(mapping.address(0), 4 * page, true, false).unwrap();
        assert!(!uffd.zeropage(mapping.address(0), page, true).unwrap(), "a zero page landed on a marker");
        assert!(uffd.copy(mapping.address(3), &[5; PAGE_BYTES], false, true).unwrap());
        let moved = uffd.move_pages(mapping.address(1), mapping.address(3), page, true).unwrap_err();
        assert_eq!(moved.errno(), Some(libc::EEXIST), "{moved}");
        // Lifted: the markers go, and the zero page and the move land.
        uffd.write_protect(mapping.address(0), 2 * page, false, false).unwrap();
        assert!(uffd.zeropage(mapping.address(0), page, true).unwrap());
        assert_eq!(uffd.move_pages(mapping.address(1), mapping.address(3), page, true).unwrap(), page);
        // A copy lands over a marker.
        assert!(uffd.copy(mapping.address(2), &[6; PAGE_BYTES], false, true).unwrap());
        // SAFETY: pages 1 and 2 are mapped now.
        unsafe {
            assert_eq!(std::ptr::read_volatile(mapping.base.add(PAGE_BYTES)), 5);
            assert_eq!(std::ptr::read_volatile(mapping.base.add(2 * PAGE_BYTES)), 6);
        }
    }
}
