//! The socket the messages travel on: unix `SOCK_SEQPACKET` (each send is one message,
//! received whole or refused as truncated), with descriptors passed as `SCM_RIGHTS`
//! and received close-on-exec.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::{ToDaemon, ToTenant, WireError, MESSAGE_BYTES_MAX};

/// Descriptors one message may carry at most (a `Hello` carries two); more are closed
/// and the message refused.
pub const FDS_MAX: usize = 4;

/// One end of a connection between a tenant's process and the daemon.
#[derive(Debug)]
pub struct Channel {
    fd: OwnedFd,
}

/// A message's bytes and the descriptors that came with it.
#[derive(Debug)]
pub struct Received {
    pub bytes: usize,
    pub fds: Vec<OwnedFd>,
}

/// Who is at the other end, as the kernel saw it when the connection was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// Why a receive gave no message.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("the connection failed: {0}")]
    Io(#[from] io::Error),
    #[error("a message longer than {MESSAGE_BYTES_MAX} bytes, or with more than {FDS_MAX} descriptors")]
    Truncated,
    #[error(transparent)]
    Wire(#[from] WireError),
}

impl Channel {
    /// Two connected ends (`znswap run`'s launcher and its program; tests).
    pub fn pair() -> io::Result<(Channel, Channel)> {
        let mut fds = [0; 2];
        // SAFETY: room for two descriptors.
        let done =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
        if done != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: two descriptors we own from here on.
        Ok(unsafe { (Channel::from_fd(OwnedFd::from_raw_fd(fds[0])), Channel::from_fd(OwnedFd::from_raw_fd(fds[1]))) })
    }

    /// Connects to a daemon listening at `path`.
    pub fn connect(path: &Path) -> io::Result<Channel> {
        let (address, len) = socket_address(path)?;
        let fd = seqpacket_socket()?;
        // SAFETY: a valid address of `len` bytes.
        if unsafe { libc::connect(fd.as_raw_fd(), (&address as *const libc::sockaddr_un).cast(), len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Channel { fd })
    }

    /// A channel over a connected `SOCK_SEQPACKET` socket (inherited, or accepted).
    pub fn from_fd(fd: OwnedFd) -> Channel {
        Channel { fd }
    }

    /// Keeps this end open in the program `command` starts (cleared close-on-exec in its
    /// child between fork and exec), at the same descriptor number, which the child
    /// learns from its caller (an environment variable, a configuration).
    pub fn keep_in_child(&self, command: &mut std::process::Command) -> RawFd {
        use std::os::unix::process::CommandExt;
        let fd = self.fd.as_raw_fd();
        // SAFETY: only fcntl between fork and exec (async-signal-safe).
        unsafe {
            command.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        fd
    }

    /// Another handle on the same connection (`shutdown` through it wakes a thread
    /// blocked receiving on this one).
    pub fn try_clone(&self) -> io::Result<Channel> {
        Ok(Channel { fd: self.fd.try_clone()? })
    }

    /// Ends the connection both ways: the peer, and any thread of ours blocked on it,
    /// see it closed.
    pub fn shutdown(&self) {
        // SAFETY: a socket of ours.
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
    }

    pub fn as_fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// The peer's pid, uid and gid (`SO_PEERCRED`, taken by the kernel at connect).
    pub fn peer(&self) -> io::Result<Peer> {
        let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: room for one ucred, its size in `len`.
        let done = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if done != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Peer { pid: cred.pid, uid: cred.uid, gid: cred.gid })
    }

    /// Sends one message's bytes with `fds`.
    pub fn send(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        assert!(fds.len() <= FDS_MAX && bytes.len() <= MESSAGE_BYTES_MAX);
        let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
        let mut control = [0u64; CONTROL_WORDS];
        // SAFETY: a zeroed msghdr is a valid empty one.
        let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        if !fds.is_empty() {
            let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
            let data_len = std::mem::size_of_val(raw.as_slice()) as u32;
            header.msg_control = control.as_mut_ptr().cast();
            // SAFETY: a pure computation.
            header.msg_controllen = unsafe { libc::CMSG_SPACE(data_len) } as _;
            // SAFETY: `control` has room for one header and FDS_MAX descriptors
            // (CONTROL_WORDS), and `msg_controllen` says how much of it is used.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&header);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as _;
                std::ptr::copy_nonoverlapping(raw.as_ptr(), libc::CMSG_DATA(cmsg).cast::<RawFd>(), raw.len());
            }
        }
        loop {
            // SAFETY: every buffer the header names lives across the call.
            let sent = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &header, libc::MSG_NOSIGNAL) };
            if sent >= 0 {
                assert_eq!(sent as usize, bytes.len(), "a SOCK_SEQPACKET send is whole");
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }

    /// Receives one message into `buf`: `None` when the peer has gone. A message
    /// larger than `buf`, or with more descriptors than `FDS_MAX`, is refused (its
    /// descriptors closed).
    pub fn recv(&self, buf: &mut [u8; MESSAGE_BYTES_MAX]) -> Result<Option<Received>, ChannelError> {
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut control = [0u64; CONTROL_WORDS];
        // SAFETY: a zeroed msghdr is a valid empty one.
        let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        header.msg_control = control.as_mut_ptr().cast();
        header.msg_controllen = std::mem::size_of_val(&control) as _;
        let got = loop {
            // SAFETY: every buffer the header names lives across the call.
            let got = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut header, libc::MSG_CMSG_CLOEXEC) };
            if got >= 0 {
                break got as usize;
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error.into());
            }
        };
        // Take ownership of every descriptor first, so that whatever is refused below
        // closes them.
        let mut fds = Vec::new();
        // SAFETY: walking the control messages the kernel wrote into `control`.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&header);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    for index in 0..data / std::mem::size_of::<RawFd>() {
                        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>().add(index));
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&header, cmsg);
            }
        }
        if header.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 || fds.len() > FDS_MAX {
            return Err(ChannelError::Truncated);
        }
        if got == 0 && fds.is_empty() {
            return Ok(None);
        }
        Ok(Some(Received { bytes: got, fds }))
    }

    pub fn send_to_daemon(&self, message: &ToDaemon, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        assert_eq!(fds.len(), message.fds(), "{:?} takes {} descriptors", message.kind(), message.fds());
        let mut bytes = Vec::with_capacity(MESSAGE_BYTES_MAX);
        message.encode(&mut bytes);
        self.send(&bytes, fds)
    }

    /// The next message from a tenant's process, with exactly the descriptors its kind
    /// takes; `None` when the process has gone.
    pub fn recv_to_daemon(&self) -> Result<Option<(ToDaemon, Vec<OwnedFd>)>, ChannelError> {
        let mut buf = [0u8; MESSAGE_BYTES_MAX];
        let Some(received) = self.recv(&mut buf)? else { return Ok(None) };
        let message = ToDaemon::decode(&buf[..received.bytes])?;
        if received.fds.len() != message.fds() {
            return Err(WireError::Fds { kind: message.kind(), want: message.fds(), got: received.fds.len() }.into());
        }
        Ok(Some((message, received.fds)))
    }

    pub fn send_to_tenant(&self, message: &ToTenant) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(MESSAGE_BYTES_MAX);
        message.encode(&mut bytes);
        self.send(&bytes, &[])
    }

    /// The next message from the daemon (which sends no descriptors); `None` when the
    /// daemon has gone.
    pub fn recv_to_tenant(&self) -> Result<Option<ToTenant>, ChannelError> {
        let mut buf = [0u8; MESSAGE_BYTES_MAX];
        let Some(received) = self.recv(&mut buf)? else { return Ok(None) };
        let message = ToTenant::decode(&buf[..received.bytes])?;
        if !received.fds.is_empty() {
            return Err(WireError::Fds { kind: message.kind(), want: 0, got: received.fds.len() }.into());
        }
        Ok(Some(message))
    }
}

/// Room for one `SCM_RIGHTS` header and `FDS_MAX` descriptors, in aligned words.
const CONTROL_WORDS: usize = 8;
const _: () = assert!(CONTROL_WORDS * 8 >= 16 + FDS_MAX * 4);

/// The daemon's listening socket.
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
}

impl Listener {
    /// Listens at `path` (which must not exist), with the socket file's permissions
    /// `mode`: who may connect is decided there first, then by the peer's uid.
    pub fn bind(path: &Path, mode: u32) -> io::Result<Listener> {
        let (address, len) = socket_address(path)?;
        let fd = seqpacket_socket()?;
        // SAFETY: a valid address of `len` bytes.
        if unsafe { libc::bind(fd.as_raw_fd(), (&address as *const libc::sockaddr_un).cast(), len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        // SAFETY: a bound socket of ours.
        if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Listener { fd })
    }

    /// The next connection (blocking).
    pub fn accept(&self) -> io::Result<Channel> {
        loop {
            // SAFETY: no address wanted; a new descriptor or -1.
            let fd = unsafe {
                libc::accept4(self.fd.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_CLOEXEC)
            };
            if fd >= 0 {
                // SAFETY: a descriptor we own from here on.
                return Ok(Channel { fd: unsafe { OwnedFd::from_raw_fd(fd) } });
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: a plain system call returning a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we own from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn socket_address(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: a zeroed sockaddr_un is a valid empty one.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= address.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the socket path {} must be 1 to {} bytes with no NUL (a shorter directory, e.g. /run/znswap)",
                path.display(),
                address.sun_path.len() - 1
            ),
        ));
    }
    for (to, &from) in address.sun_path.iter_mut().zip(bytes) {
        *to = from as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((address, len as libc::socklen_t))
}
