//! A served process's connection, the daemon's side (`docs/daemon.md`): its `Hello`
//! taken and checked, then its calls served until it leaves. `znswap daemon` and `znswap
//! run --serve` both serve processes so.

use std::os::fd::{AsRawFd, FromRawFd};

use znswap_wire::{Channel, ForkPage, Hello, Kind, Reason, ToDaemon, ToTenant, Token};

use znswap_pager::{ForkFill, ForkSnapshot, Pager, TenantError, TenantId, TenantLink, PAGE_BYTES};

/// A process that said `Hello`: what it said, and its link for `Pager::add_tenant`.
pub struct Arrival {
    pub hello: Hello,
    pub link: TenantLink,
}

/// What went wrong with a connection (the process is refused or let go; the pager
/// goes on).
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("it began with {0:?}, not a Hello")]
    NoHello(Box<ToDaemon>),
    #[error("its Hello names pid {said}, but the connection is from pid {peer}")]
    NotItsPid { said: u32, peer: u32 },
    #[error("its Hello: {0}")]
    Link(#[from] TenantError),
    #[error("it sent {0:?}, which is not served")]
    Unexpected(Box<ToDaemon>),
    #[error("pid {child} asked for a fork's pages with a token of no fork of its parent")]
    NotAFork { child: u32 },
    #[error("its fork's staging buffer is not a page of memory sealed against shrinking (a memfd with F_SEAL_SHRINK)")]
    Staging,
    #[error(transparent)]
    Channel(#[from] znswap_wire::ChannelError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Takes the process's `Hello` on `channel` and its descriptors, and checks that it
/// comes from `pid` (the connection's peer, or the launcher's own child for a socket it
/// made); a refusal is sent before the error returns. `None`: it hung up first.
/// `tenant`: the engine's tenant it will be charged to.
pub fn arrive(channel: &Channel, pid: u32, tenant: u32) -> Result<Option<Arrival>, ConnectionError> {
    match channel.recv_to_daemon()? {
        None => Ok(None),
        Some((ToDaemon::Hello(hello), fds)) => take_hello(channel, hello, fds, pid, tenant).map(Some),
        Some((message, _)) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::BadMessage));
            Err(ConnectionError::NoHello(Box::new(message)))
        }
    }
}

/// A `Hello` received on `channel` with its descriptors `fds`, checked as `arrive` does.
pub fn take_hello(
    channel: &Channel,
    hello: Hello,
    fds: Vec<std::os::fd::OwnedFd>,
    pid: u32,
    tenant: u32,
) -> Result<Arrival, ConnectionError> {
    if hello.pid != pid {
        let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::NotAllowed));
        return Err(ConnectionError::NotItsPid { said: hello.pid, peer: pid });
    }
    match TenantLink::from_hello(&hello, fds, tenant) {
        Ok(link) => Ok(Arrival { hello, link }),
        Err(error) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::BadMessage));
            Err(error.into())
        }
    }
}

/// Serves served process `id`'s calls on `channel` until it says `Bye` or hangs up:
/// each of its discards is taken into the pager's state, then the process zaps the
/// range (`Pager::tenant_discard_then`); with `forks`, its forks get
/// snapshots for their children (`ForkRegistry`; without, a `Forking` is refused). An
/// error is a process that broke the protocol: it is to be let go.
pub fn serve_calls(
    pager: &Pager,
    id: TenantId,
    pid: u32,
    channel: &Channel,
    forks: Option<&std::sync::Arc<ForkRegistry>>,
) -> Result<(), ConnectionError> {
    // The snapshot of a fork under way (between `Forking` and `Forked`).
    let mut forking: Option<Token> = None;
    loop {
        match channel.recv_to_daemon()? {
            Some((ToDaemon::ProgramDiscard(range), _)) => {
                let mut broke = None;
                pager.tenant_discard_then(id, range.start(), range.len(), || {
                    // The process zaps now: the pager took the discard and let its lock go.
                    if channel.send_to_tenant(&ToTenant::Ack(Kind::ProgramDiscard)).is_err() {
                        return -1;
                    }
                    match channel.recv_to_daemon() {
                        Ok(Some((ToDaemon::Zapped { errno: 0 }, _))) => 0,
                        Ok(Some((ToDaemon::Zapped { .. }, _))) => -1,
                        Ok(Some((message, _))) => {
                            broke = Some(message);
                            -1
                        }
                        _ => -1,
                    }
                });
                if let Some(message) = broke {
                    return Err(ConnectionError::Unexpected(Box::new(message)));
                }
            }
            Some((ToDaemon::Forking, _)) if forking.is_none() => {
                let token = forks.and_then(|forks| forks.begin(pager, id, pid));
                forking = token;
                match token {
                    Some(token) => channel.send_to_tenant(&ToTenant::ForkSnapshot { token })?,
                    None => channel.send_to_tenant(&ToTenant::Refused(Reason::Full))?,
                }
            }
            Some((ToDaemon::Forked { child }, _)) => {
                if let (Some(token), Some(forks)) = (forking.take(), forks) {
                    forks.forked(token, child);
                }
                channel.send_to_tenant(&ToTenant::Ack(Kind::Forked))?;
            }
            Some((ToDaemon::Bye, _)) | None => break,
            Some((message, _)) => {
                if let (Some(token), Some(forks)) = (forking, forks) {
                    forks.release_untaken(&token);
                }
                return Err(ConnectionError::Unexpected(Box::new(message)));
            }
        }
    }
    // A fork that never said how it went: its child reads nothing, unless it came for
    // the snapshot already (then it is let go when that child is).
    if let (Some(token), Some(forks)) = (forking, forks) {
        forks.release_untaken(&token);
    }
    Ok(())
}

/// The snapshots of served processes' forks, for their children (`docs/daemon.md`): a
/// child reads the pages its parent had on the device at the fork, by the token its
/// parent got, on a connection of its own. A snapshot holds the device's zone resets:
/// it is let go when the child exits or executes (its connection closes), when the
/// child is found gone, or when the fork failed.
#[derive(Default)]
pub struct ForkRegistry {
    forks: std::sync::Mutex<Vec<ServedFork>>,
}

struct ServedFork {
    token: Token,
    /// The forking process.
    parent: u32,
    snapshot: std::sync::Arc<ForkSnapshot>,
    /// Its child came for it (to read its pages, or to be paged): once only.
    taken: bool,
}

impl ForkRegistry {
    /// Served process `id` (pid `parent`) is about to fork: its snapshot, and the token
    /// its child asks by.
    pub(crate) fn begin(&self, pager: &Pager, id: TenantId, parent: u32) -> Option<Token> {
        let snapshot = pager.tenant_fork_snapshot(id)?;
        // (A snapshot dropped is released.)
        let token = Token::random().ok()?;
        let fork = ServedFork { token, parent, snapshot: std::sync::Arc::new(snapshot), taken: false };
        self.forks.lock().unwrap_or_else(|p| p.into_inner()).push(fork);
        Some(token)
    }

    /// The fork returned `child` in the parent (0 or less: it failed). The snapshot is
    /// let go when the child is gone, whether or not it ever asked for a page.
    fn forked(self: &std::sync::Arc<Self>, token: Token, child: u32) {
        // SAFETY: a new descriptor of our own, or -1.
        let pidfd = (child > 0).then(|| unsafe { libc::syscall(libc::SYS_pidfd_open, child, 0) } as i32);
        let Some(pidfd) = pidfd.filter(|&fd| fd >= 0) else {
            // The fork failed, or its child is gone already.
            return self.release(&token);
        };
        // SAFETY: the descriptor just opened, ours from here on.
        let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(pidfd) };
        let forks = self.clone();
        let watched = std::thread::Builder::new().name("znswap-fork".into()).spawn(move || {
            let mut poll = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one pollfd of ours; readable once the child has exited.
            while unsafe { libc::poll(&mut poll, 1, -1) } < 0 {}
            forks.release(&token);
        });
        if watched.is_err() {
            self.release(&token);
        }
    }

    /// Lets snapshot `token` go (if it still is).
    pub fn release(&self, token: &Token) {
        self.release_if(token, |_| true)
    }

    /// Lets snapshot `token` go unless its child came for it (whose server lets it go).
    fn release_untaken(&self, token: &Token) {
        self.release_if(token, |fork| !fork.taken)
    }

    fn release_if(&self, token: &Token, and: impl Fn(&ServedFork) -> bool) {
        let mut forks = self.forks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = forks.iter().position(|fork| fork.token == *token && and(fork)) {
            let fork = forks.swap_remove(at);
            drop(forks);
            fork.snapshot.release();
        }
    }

    /// The snapshot `token` names, for the fork's child `child` (checked: the token, that
    /// the forking process is its parent, and that no child came for it before). Let it
    /// go (`release`) once the child is no longer served.
    pub fn take(&self, child: u32, token: Token) -> Result<std::sync::Arc<ForkSnapshot>, ConnectionError> {
        let mut forks = self.forks.lock().unwrap_or_else(|p| p.into_inner());
        let parent = parent_of(child);
        let fork = forks.iter_mut().find(|fork| fork.token == token && !fork.taken && Some(fork.parent) == parent);
        let Some(fork) = fork else {
            return Err(ConnectionError::NotAFork { child });
        };
        fork.taken = true;
        Ok(fork.snapshot.clone())
    }

    /// Snapshot `token`, taken for a child the daemon then could not page, is the
    /// child's to read again (`serve_child`), as if never taken.
    pub fn give_back(&self, token: &Token) {
        let mut forks = self.forks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(fork) = forks.iter_mut().find(|fork| fork.token == *token) {
            fork.taken = false;
        }
    }

    /// A fork's child (pid `child`) asks for its parent's pages with `token`, staging
    /// them in `staging` (a memfd of one page): checked (the token, and that its parent
    /// is the process that forked), then served until it hangs up, which lets the
    /// snapshot go (it exited, or executed another program).
    pub fn serve_child(
        &self,
        channel: &Channel,
        child: u32,
        token: Token,
        staging: std::os::fd::OwnedFd,
    ) -> Result<(), ConnectionError> {
        let snapshot = match self.take(child, token) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::UnknownTenant));
                return Err(error);
            }
        };
        let mut staging = Staging::map(staging)?;
        channel.send_to_tenant(&ToTenant::Ack(Kind::ForkChild))?;
        let served = loop {
            match channel.recv_to_daemon()? {
                Some((ToDaemon::ForkRead(page), _)) => {
                    let fill = snapshot.read(page.start(), staging.page());
                    let answer = match fill {
                        ForkFill::Data => ForkPage::Data,
                        ForkFill::Zero => ForkPage::Zero,
                        ForkFill::Lost => ForkPage::Lost,
                    };
                    channel.send_to_tenant(&ToTenant::ForkPage(answer))?;
                }
                None | Some((ToDaemon::Bye, _)) => break Ok(()),
                Some((message, _)) => break Err(ConnectionError::Unexpected(Box::new(message))),
            }
        };
        self.release(&token);
        served
    }
}

/// The parent of process `pid`, from `/proc/PID/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": the command may hold spaces and parentheses.
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

/// A fork's child's one-page staging buffer (its memfd), mapped here.
struct Staging {
    at: *mut u8,
}

impl Staging {
    fn map(fd: std::os::fd::OwnedFd) -> Result<Staging, ConnectionError> {
        // Sealed against shrinking: a child that truncated it under the mapping would
        // make the daemon's next write into it a SIGBUS in the daemon.
        // SAFETY: reads the seals of a descriptor we own (fails on anything not a memfd).
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(ConnectionError::Staging);
        }
        // SAFETY: plain data, filled by fstat.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a descriptor we own, and a stat buffer of ours.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 || stat.st_size < PAGE_BYTES as i64 {
            return Err(ConnectionError::Staging);
        }
        // SAFETY: a shared mapping of the first page of the child's buffer; the child
        // only reads it after each answer.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(ConnectionError::Staging);
        }
        Ok(Staging { at: at.cast() })
    }

    fn page(&mut self) -> &mut [u8] {
        // SAFETY: one mapped page of ours, borrowed as this mapping is.
        unsafe { std::slice::from_raw_parts_mut(self.at, PAGE_BYTES) }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`.
        unsafe { libc::munmap(self.at.cast(), PAGE_BYTES) };
    }
}
