//! The messages and their bytes. Every message is a header and a body of a size fixed by
//! its kind (a discard's ranges are counted), all little-endian; the two directions use
//! disjoint kinds, so a message sent the wrong way is an unknown kind. Decoding never
//! panics and takes nothing on trust: lengths, reserved bytes, flags, ranges and names are
//! checked, and the first problem is named.

use crate::WireError;

/// The protocol's version; a peer speaking another is refused (`Reason::Version`).
pub const VERSION: u16 = 2;
pub const PAGE_BYTES: u64 = 4096;
/// One past the highest user-space address a range may reach (57-bit address spaces).
pub const USER_END: u64 = 1 << 56;
/// Ranges in one `Discard` at most.
pub const RANGES_MAX: usize = 64;
/// A tenant's name, in bytes of UTF-8.
pub const NAME_BYTES: usize = 32;
pub const TOKEN_BYTES: usize = 16;
const HEADER_BYTES: usize = 8;
/// The largest message either side sends (a full `Discard`): a receive buffer this
/// size never truncates a valid message.
pub const MESSAGE_BYTES_MAX: usize = HEADER_BYTES + 16 + RANGES_MAX * 16;

/// A page-aligned range of a tenant's address space, not empty, within user space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    start: u64,
    len: u64,
}

impl Range {
    pub fn new(start: u64, len: u64) -> Result<Range, WireError> {
        let why = if len == 0 {
            "it is empty"
        } else if start % PAGE_BYTES != 0 || len % PAGE_BYTES != 0 {
            "it is not page aligned"
        } else if start.checked_add(len).is_none_or(|end| end > USER_END) {
            "it reaches past user space"
        } else {
            return Ok(Range { start, len });
        };
        Err(WireError::Range { start, len, why })
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn end(&self) -> u64 {
        self.start + self.len
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// What a tenant's later processes show to join it (an exec'd descendant has it from
/// its environment, a forked child from its parent's memory).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Token(pub [u8; TOKEN_BYTES]);

impl Token {
    /// As it travels in an environment variable.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    pub fn from_hex(hex: &str) -> Option<Token> {
        if hex.len() != 2 * TOKEN_BYTES || !hex.is_ascii() {
            return None;
        }
        let mut token = [0; TOKEN_BYTES];
        for (index, byte) in token.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * index..2 * index + 2], 16).ok()?;
        }
        Some(Token(token))
    }

    /// A new token from the kernel's random source.
    pub fn random() -> std::io::Result<Token> {
        let mut token = [0; TOKEN_BYTES];
        // SAFETY: fills our own buffer.
        let got = unsafe { libc::getrandom(token.as_mut_ptr().cast(), TOKEN_BYTES, 0) };
        if got != TOKEN_BYTES as isize {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Token(token))
    }
}

impl std::fmt::Debug for Token {
    // A token is a credential: never printed whole.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({:02x}{:02x}..)", self.0[0], self.0[1])
    }
}

/// A tenant's name as people see it (`--tenant`, or its command): 1 to `NAME_BYTES`
/// bytes of UTF-8 without control characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name(String);

impl Name {
    pub fn new(name: &str) -> Result<Name, WireError> {
        let why = if name.is_empty() {
            "it is empty"
        } else if name.len() > NAME_BYTES {
            "it is longer than 32 bytes"
        } else if name.chars().any(char::is_control) {
            "it has control characters"
        } else {
            return Ok(Name(name.to_owned()));
        };
        Err(WireError::Name { why })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn to_bytes(&self) -> [u8; NAME_BYTES] {
        let mut bytes = [0; NAME_BYTES];
        bytes[..self.0.len()].copy_from_slice(self.0.as_bytes());
        bytes
    }

    fn from_bytes(bytes: [u8; NAME_BYTES]) -> Result<Name, WireError> {
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(NAME_BYTES);
        if bytes[len..].iter().any(|&b| b != 0) {
            return Err(WireError::Name { why: "it has bytes after its end" });
        }
        let name = std::str::from_utf8(&bytes[..len]).map_err(|_| WireError::Name { why: "it is not UTF-8" })?;
        Name::new(name)
    }
}

/// Which tenant a process belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Join {
    /// The first process of a new tenant.
    New(Name),
    /// A later process of the tenant the token names.
    Tenant(Token),
    /// A fork's child of a process of the tenant `tenant` names, paged within it: its
    /// pages that were on the device at the fork are read from the daemon's snapshot of
    /// the fork, which `fork` names (`ToTenant::ForkSnapshot`).
    ForkChild { tenant: Token, fork: Token },
}

/// The first message on a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The process's pid as it sees it (the daemon checks it against `SO_PEERCRED`).
    pub pid: u32,
    /// A fork's child: its userfaultfd reached the daemon with the fork's event, so it
    /// sends only its `/proc/self/mem`.
    pub forked: bool,
    /// The features its userfaultfd was opened with.
    pub uffd_features: u64,
    /// The paged arena, registered on that userfaultfd.
    pub arena: Range,
    pub join: Join,
    /// The resident budget it asks for, in pages (`znswap run --memory`); the daemon
    /// grants it in its `Welcome` or refuses.
    pub memory_pages: u64,
}

impl Hello {
    /// Descriptors that come with it: the userfaultfd (unless `forked`), the process's
    /// `/proc/self/mem`, and its agent's end of a socket pair (the daemon's requests,
    /// apart from this connection's calls and their replies).
    pub fn fds(&self) -> usize {
        if self.forked {
            2
        } else {
            3
        }
    }
}

/// From a tenant's process to the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToDaemon {
    Hello(Hello),
    /// A range of the arena the program mapped and the process registered.
    RegionAdd(Range),
    /// A range the process is about to unregister and unmap.
    RegionRemove(Range),
    /// The process forked (sent once `fork` returned, so the daemon has read the fork's
    /// event): the child's pid.
    Forked {
        child: u32,
    },
    /// A `Discard` batch is done: its ranges are dropped (on the agent's socket).
    Discarded {
        batch: u64,
    },
    Bye,
    /// The program discards a range (`madvise(MADV_DONTNEED)`, `munmap`): the daemon
    /// frees its slots and answers `Ack`, the process zaps the range and says `Zapped`,
    /// the daemon holding its state meanwhile so that no fault maps a page in between.
    ProgramDiscard(Range),
    /// The zap is done: 0, or the errno `madvise` failed with.
    Zapped {
        errno: u32,
    },
    /// A launcher opens a tenant for the program it starts and every process that
    /// program starts (`znswap run --daemon`): answered `Welcome` with the token its
    /// processes join by, or `Refused`. The tenant's grant is held while this connection
    /// is open or any process of the tenant is served.
    Open {
        name: Name,
        memory_pages: u64,
        /// What the tenant may write to the device a second, its swap-outs and the GC's
        /// moves of its pages together (0: no limit of its own; the daemon's applies).
        write_limit: u64,
        /// Pages the tenant may hold on the device (0: no limit of its own).
        swap_limit_pages: u64,
    },
    /// What the daemon and each tenant hold and have done (`znswap status`): answered
    /// `Status`, then one `TenantStatus` per tenant.
    Status,
    /// The process is about to fork (its drops and discards held until `Forked`): the
    /// daemon keeps where its pages on the device are for the child, and answers
    /// `ForkSnapshot` with the token the child asks for them by.
    Forking,
    /// A fork's child, on a connection of its own: it reads its parent's pages as at the
    /// fork, with a one-page staging buffer (a memfd) the daemon writes them into.
    /// Answered `Ack(ForkChild)` or `Refused`.
    ForkChild {
        token: Token,
    },
    /// The child faulted on this page (one page of its arena): answered `ForkPage`.
    ForkRead(Range),
}

/// Why the daemon refuses a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// It speaks another version of this protocol.
    Version,
    /// Its user may not use this daemon.
    NotAllowed,
    /// It sent something the daemon could not decode (it is disconnected).
    BadMessage,
    /// Its token names no tenant the daemon serves.
    UnknownTenant,
    /// The daemon serves as many processes as it may.
    Full,
    /// The memory it asks for is more than the daemon has left to grant.
    NoMemory,
}

impl Reason {
    /// Every reason, as the decoder knows them.
    pub const ALL: [Reason; 6] = [
        Reason::Version,
        Reason::NotAllowed,
        Reason::BadMessage,
        Reason::UnknownTenant,
        Reason::Full,
        Reason::NoMemory,
    ];

    fn code(self) -> u32 {
        self as u32 + 1
    }

    fn from_code(code: u32) -> Result<Reason, WireError> {
        Reason::ALL.into_iter().find(|r| r.code() == code).ok_or(WireError::Reason { code })
    }

    /// What a user reads, with what to do.
    pub fn explain(self) -> &'static str {
        match self {
            Reason::Version => "the daemon speaks another version of znswap's protocol: run the znswap that started it",
            Reason::NotAllowed => {
                "this user may not use the daemon: start it with --allow-uid for this user, or run as one it allows"
            }
            Reason::BadMessage => "the daemon could not decode a message from this process (a bug: please report it)",
            Reason::UnknownTenant => "the tenant this process was started in is gone from the daemon",
            Reason::Full => "the daemon serves as many processes as it may",
            Reason::NoMemory => {
                "the daemon has not that much of its --memory left to grant (other programs hold the rest, and its \
                 compressed pool, if any, is not granted): ask for less with --memory (`znswap status` shows what is \
                 granted), or start the daemon with more"
            }
        }
    }
}

/// From the daemon to a tenant's process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToTenant {
    /// The process is served, as a process of tenant `tenant`.
    Welcome {
        tenant: u32,
        token: Token,
        budget_pages: u64,
    },
    Refused(Reason),
    /// Drop these ranges (`MADV_DONTNEED`), then say `Discarded { batch }`.
    Discard {
        batch: u64,
        ranges: Vec<Range>,
    },
    /// A `RegionAdd`, `RegionRemove` or `Forked` is taken into account; for a
    /// `ProgramDiscard`, the process may zap the range now.
    Ack(Kind),
    /// The daemon's figures; `tenants` `TenantStatus` messages follow.
    Status(DaemonStatus),
    TenantStatus(TenantStatus),
    /// The snapshot a `Forking` process's child reads by.
    ForkSnapshot {
        token: Token,
    },
    /// A `ForkRead` page: in the staging buffer, all zero, or lost (poison it).
    ForkPage(ForkPage),
}

/// What a fork's child gets for a page (`ToTenant::ForkPage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkPage {
    /// Its bytes are in the staging buffer.
    Data = 1,
    Zero = 2,
    /// Lost: the child must not get a guess (SIGBUS when touched).
    Lost = 3,
}

/// The daemon's own figures, as `znswap status` shows them. Pages are 4 KiB; counts are
/// since the daemon started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DaemonStatus {
    pub pid: u32,
    /// Tenants served now (as many `TenantStatus` follow).
    pub tenants: u32,
    pub uptime_ms: u64,
    /// The daemon's `--memory`, and what of it is granted to tenants now.
    pub memory_pages: u64,
    pub granted_pages: u64,
    /// The served heaps' pages in memory now.
    pub resident_pages: u64,
    /// Pages swapped out (as `TenantStatus::swap_outs`), read back, and lost to device
    /// errors.
    pub swap_outs: u64,
    pub swap_ins: u64,
    pub lost_pages: u64,
    /// Data pages written for swap-outs and by the GC, and record pages (footers).
    pub host_pages_written: u64,
    pub gc_pages_written: u64,
    pub record_pages_written: u64,
    pub zone_resets: u64,
    /// The device's usable size.
    pub device_bytes: u64,
    /// The compressed pool (all 0 without one): its size (part of `memory_pages`), the
    /// pages it holds now, the pages it served with no device read, and the bytes of the
    /// pages it kept, before and after compression.
    pub compressed_pool_bytes: u64,
    pub compressed_pool_pages_held: u64,
    pub compressed_pool_pages_served: u64,
    pub compressed_pool_stored_raw_bytes: u64,
    pub compressed_pool_stored_bytes: u64,
}

/// One tenant's figures (a program and the processes it started).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantStatus {
    /// The engine's tenant: its swap-zones under the tenant policy, its GC bill.
    pub tenant: u32,
    /// Its processes served now.
    pub processes: u32,
    pub name: Name,
    /// Its processes served since it began.
    pub processes_joined: u64,
    pub budget_pages: u64,
    pub resident_pages: u64,
    /// Its pages swapped out (gone from memory to the device, written or still there
    /// from before), and read back.
    pub swap_outs: u64,
    pub swap_ins: u64,
    /// Bytes the GC moved of its data (charged to it).
    pub gc_bytes: u64,
    /// Its processes' faults served, and their latency's 99th percentile, in ns.
    pub faults: u64,
    pub fault_p99_ns: u64,
    /// Where those faults' time went, in ns summed over them: all of it (from the
    /// daemon reading the fault to its wake-up), waiting for the daemon's state lock,
    /// device reads (and how many), installing pages, waiting for room in its budget,
    /// and the rest of the waits (for a page on its way out, the lock's release).
    pub fault_handled_ns: u64,
    pub fault_lock_wait_ns: u64,
    pub fault_read_ns: u64,
    pub fault_reads: u64,
    pub fault_install_ns: u64,
    pub fault_room_wait_ns: u64,
    pub fault_other_wait_ns: u64,
    /// Bytes its swap-outs wrote; its write limit, bytes a second (0: none); how long
    /// its swap-outs waited for it, in ns.
    pub written_bytes: u64,
    pub write_limit: u64,
    pub throttled_ns: u64,
    /// Bytes let through past its share when it was held back longest.
    pub grace_bytes: u64,
    /// Its pages on the device (swapped out, or kept as their swap cache), and its swap
    /// limit in pages (0: none).
    pub swap_pages: u64,
    pub swap_limit_pages: u64,
}

/// Every message's kind, as on the wire: tenant to daemon below 0x80, daemon to
/// tenant from 0x80.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Kind {
    Hello = 0x01,
    RegionAdd = 0x02,
    RegionRemove = 0x03,
    Forked = 0x04,
    Discarded = 0x05,
    Bye = 0x06,
    ProgramDiscard = 0x07,
    Zapped = 0x08,
    Open = 0x09,
    Status = 0x0a,
    Forking = 0x0b,
    ForkChild = 0x0c,
    ForkRead = 0x0d,
    Welcome = 0x81,
    Refused = 0x82,
    Discard = 0x83,
    Ack = 0x84,
    StatusReply = 0x85,
    TenantStatus = 0x86,
    ForkSnapshot = 0x87,
    ForkPage = 0x88,
}

impl Kind {
    const ALL: [Kind; 21] = [
        Kind::Hello,
        Kind::RegionAdd,
        Kind::RegionRemove,
        Kind::Forked,
        Kind::Discarded,
        Kind::Bye,
        Kind::ProgramDiscard,
        Kind::Zapped,
        Kind::Open,
        Kind::Status,
        Kind::Forking,
        Kind::ForkChild,
        Kind::ForkRead,
        Kind::Welcome,
        Kind::Refused,
        Kind::Discard,
        Kind::Ack,
        Kind::StatusReply,
        Kind::TenantStatus,
        Kind::ForkSnapshot,
        Kind::ForkPage,
    ];

    fn from_code(code: u16) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u16 == code)
    }

    fn to_daemon(self) -> bool {
        (self as u16) < 0x80
    }

    /// The body's size, or for a discard the size before its ranges.
    fn body_bytes(self) -> usize {
        match self {
            Kind::Hello => 88,
            Kind::RegionAdd | Kind::RegionRemove | Kind::ProgramDiscard => 16,
            Kind::Forked | Kind::Discarded | Kind::Refused | Kind::Ack | Kind::Zapped => 8,
            Kind::Bye | Kind::Status | Kind::Forking => 0,
            Kind::ForkChild | Kind::ForkSnapshot | Kind::ForkRead => 16,
            Kind::ForkPage => 8,
            Kind::Open => NAME_BYTES + 24,
            Kind::Welcome => 32,
            Kind::Discard => 16,
            Kind::StatusReply => 8 + 17 * 8,
            Kind::TenantStatus => 8 + NAME_BYTES + 21 * 8,
        }
    }
}

const HELLO_FORKED: u32 = 1 << 0;
const HELLO_BY_TOKEN: u32 = 1 << 1;
/// With `HELLO_BY_TOKEN`: a fork's child (`Join::ForkChild`), whose fork's token is the
/// name field's first bytes.
const HELLO_FORK_CHILD: u32 = 1 << 2;

impl ToDaemon {
    pub fn kind(&self) -> Kind {
        match self {
            ToDaemon::Hello(_) => Kind::Hello,
            ToDaemon::RegionAdd(_) => Kind::RegionAdd,
            ToDaemon::RegionRemove(_) => Kind::RegionRemove,
            ToDaemon::Forked { .. } => Kind::Forked,
            ToDaemon::Discarded { .. } => Kind::Discarded,
            ToDaemon::Bye => Kind::Bye,
            ToDaemon::ProgramDiscard(_) => Kind::ProgramDiscard,
            ToDaemon::Zapped { .. } => Kind::Zapped,
            ToDaemon::Open { .. } => Kind::Open,
            ToDaemon::Status => Kind::Status,
            ToDaemon::Forking => Kind::Forking,
            ToDaemon::ForkChild { .. } => Kind::ForkChild,
            ToDaemon::ForkRead(_) => Kind::ForkRead,
        }
    }

    /// Descriptors that must come with this message.
    pub fn fds(&self) -> usize {
        match self {
            ToDaemon::Hello(hello) => hello.fds(),
            ToDaemon::ForkChild { .. } => 1,
            _ => 0,
        }
    }

    /// Appends the message's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::start(out, self.kind());
        match self {
            ToDaemon::Hello(hello) => {
                let (by_token, token, name) = match &hello.join {
                    Join::New(name) => (0, [0; TOKEN_BYTES], name.to_bytes()),
                    Join::Tenant(token) => (HELLO_BY_TOKEN, token.0, [0; NAME_BYTES]),
                    Join::ForkChild { tenant, fork } => {
                        let mut name = [0; NAME_BYTES];
                        name[..TOKEN_BYTES].copy_from_slice(&fork.0);
                        (HELLO_BY_TOKEN | HELLO_FORK_CHILD, tenant.0, name)
                    }
                };
                w.u32(hello.pid);
                w.u32(if hello.forked { HELLO_FORKED } else { 0 } | by_token);
                w.u64(hello.uffd_features);
                w.range(hello.arena);
                w.bytes(&token);
                w.bytes(&name);
                w.u64(hello.memory_pages);
            }
            ToDaemon::RegionAdd(range) | ToDaemon::RegionRemove(range) | ToDaemon::ProgramDiscard(range) => {
                w.range(*range)
            }
            ToDaemon::Zapped { errno } => {
                w.u32(*errno);
                w.u32(0);
            }
            ToDaemon::Forked { child } => {
                w.u32(*child);
                w.u32(0);
            }
            ToDaemon::Discarded { batch } => w.u64(*batch),
            ToDaemon::Bye | ToDaemon::Status | ToDaemon::Forking => {}
            ToDaemon::ForkChild { token } => w.bytes(&token.0),
            ToDaemon::ForkRead(range) => w.range(*range),
            ToDaemon::Open { name, memory_pages, write_limit, swap_limit_pages } => {
                w.bytes(&name.to_bytes());
                w.u64(*memory_pages);
                w.u64(*write_limit);
                w.u64(*swap_limit_pages);
            }
        }
        w.finish();
    }

    pub fn decode(bytes: &[u8]) -> Result<ToDaemon, WireError> {
        let (kind, mut r) = Reader::start(bytes, true)?;
        let message = match kind {
            Kind::Hello => {
                let pid = r.u32();
                let flags = r.u32();
                if flags & !(HELLO_FORKED | HELLO_BY_TOKEN | HELLO_FORK_CHILD) != 0
                    || flags & HELLO_FORK_CHILD != 0 && flags & HELLO_BY_TOKEN == 0
                {
                    return Err(WireError::Flags { kind, flags });
                }
                let uffd_features = r.u64();
                let arena = r.range()?;
                let token = Token(r.bytes());
                let name = r.bytes::<NAME_BYTES>();
                let join = if flags & HELLO_FORK_CHILD != 0 {
                    if name[TOKEN_BYTES..] != [0; NAME_BYTES - TOKEN_BYTES] {
                        return Err(WireError::Reserved { kind });
                    }
                    let fork = Token(name[..TOKEN_BYTES].try_into().expect("a token's bytes"));
                    Join::ForkChild { tenant: token, fork }
                } else if flags & HELLO_BY_TOKEN != 0 {
                    if name != [0; NAME_BYTES] {
                        return Err(WireError::Name { why: "a process joining by token sends no name" });
                    }
                    Join::Tenant(token)
                } else {
                    if token.0 != [0; TOKEN_BYTES] {
                        return Err(WireError::Reserved { kind });
                    }
                    Join::New(Name::from_bytes(name)?)
                };
                let memory_pages = r.u64();
                ToDaemon::Hello(Hello {
                    pid,
                    forked: flags & HELLO_FORKED != 0,
                    uffd_features,
                    arena,
                    join,
                    memory_pages,
                })
            }
            Kind::RegionAdd => ToDaemon::RegionAdd(r.range()?),
            Kind::RegionRemove => ToDaemon::RegionRemove(r.range()?),
            Kind::Forked => {
                let child = r.u32();
                r.zero_u32(kind)?;
                ToDaemon::Forked { child }
            }
            Kind::Discarded => ToDaemon::Discarded { batch: r.u64() },
            Kind::Bye => ToDaemon::Bye,
            Kind::ProgramDiscard => ToDaemon::ProgramDiscard(r.range()?),
            Kind::Zapped => {
                let errno = r.u32();
                r.zero_u32(kind)?;
                ToDaemon::Zapped { errno }
            }
            Kind::Open => {
                let name = Name::from_bytes(r.bytes())?;
                ToDaemon::Open { name, memory_pages: r.u64(), write_limit: r.u64(), swap_limit_pages: r.u64() }
            }
            Kind::Status => ToDaemon::Status,
            Kind::Forking => ToDaemon::Forking,
            Kind::ForkChild => ToDaemon::ForkChild { token: Token(r.bytes()) },
            Kind::ForkRead => {
                let range = r.range()?;
                if range.len() != PAGE_BYTES {
                    return Err(WireError::Range { start: range.start(), len: range.len(), why: "it is not one page" });
                }
                ToDaemon::ForkRead(range)
            }
            _ => unreachable!("Reader::start checked the direction"),
        };
        r.finish();
        Ok(message)
    }
}

impl ToTenant {
    pub fn kind(&self) -> Kind {
        match self {
            ToTenant::Welcome { .. } => Kind::Welcome,
            ToTenant::Refused(_) => Kind::Refused,
            ToTenant::Discard { .. } => Kind::Discard,
            ToTenant::Ack(_) => Kind::Ack,
            ToTenant::Status(_) => Kind::StatusReply,
            ToTenant::TenantStatus(_) => Kind::TenantStatus,
            ToTenant::ForkSnapshot { .. } => Kind::ForkSnapshot,
            ToTenant::ForkPage(_) => Kind::ForkPage,
        }
    }

    /// Appends the message's bytes to `out`. A discard holds 1 to `RANGES_MAX` ranges
    /// (the daemon's batches are built that size; a caller's bug otherwise).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer::start(out, self.kind());
        match self {
            ToTenant::Welcome { tenant, token, budget_pages } => {
                w.u32(*tenant);
                w.u32(0);
                w.bytes(&token.0);
                w.u64(*budget_pages);
            }
            ToTenant::Refused(reason) => {
                w.u32(reason.code());
                w.u32(0);
            }
            ToTenant::Discard { batch, ranges } => {
                assert!((1..=RANGES_MAX).contains(&ranges.len()), "a discard of {} ranges", ranges.len());
                w.u64(*batch);
                w.u32(ranges.len() as u32);
                w.u32(0);
                for range in ranges {
                    w.range(*range);
                }
            }
            ToTenant::Ack(of) => {
                w.u16(*of as u16);
                w.u16(0);
                w.u32(0);
            }
            ToTenant::Status(status) => {
                w.u32(status.pid);
                w.u32(status.tenants);
                for figure in [
                    status.uptime_ms,
                    status.memory_pages,
                    status.granted_pages,
                    status.resident_pages,
                    status.swap_outs,
                    status.swap_ins,
                    status.lost_pages,
                    status.host_pages_written,
                    status.gc_pages_written,
                    status.record_pages_written,
                    status.zone_resets,
                    status.device_bytes,
                    status.compressed_pool_bytes,
                    status.compressed_pool_pages_held,
                    status.compressed_pool_pages_served,
                    status.compressed_pool_stored_raw_bytes,
                    status.compressed_pool_stored_bytes,
                ] {
                    w.u64(figure);
                }
            }
            ToTenant::ForkSnapshot { token } => w.bytes(&token.0),
            ToTenant::ForkPage(page) => {
                w.u32(*page as u32);
                w.u32(0);
            }
            ToTenant::TenantStatus(tenant) => {
                w.u32(tenant.tenant);
                w.u32(tenant.processes);
                w.bytes(&tenant.name.to_bytes());
                for figure in [
                    tenant.processes_joined,
                    tenant.budget_pages,
                    tenant.resident_pages,
                    tenant.swap_outs,
                    tenant.swap_ins,
                    tenant.gc_bytes,
                    tenant.faults,
                    tenant.fault_p99_ns,
                    tenant.fault_handled_ns,
                    tenant.fault_lock_wait_ns,
                    tenant.fault_read_ns,
                    tenant.fault_reads,
                    tenant.fault_install_ns,
                    tenant.fault_room_wait_ns,
                    tenant.fault_other_wait_ns,
                    tenant.written_bytes,
                    tenant.write_limit,
                    tenant.throttled_ns,
                    tenant.grace_bytes,
                    tenant.swap_pages,
                    tenant.swap_limit_pages,
                ] {
                    w.u64(figure);
                }
            }
        }
        w.finish();
    }

    pub fn decode(bytes: &[u8]) -> Result<ToTenant, WireError> {
        let (kind, mut r) = Reader::start(bytes, false)?;
        let message = match kind {
            Kind::Welcome => {
                let tenant = r.u32();
                r.zero_u32(kind)?;
                ToTenant::Welcome { tenant, token: Token(r.bytes()), budget_pages: r.u64() }
            }
            Kind::Refused => {
                let reason = Reason::from_code(r.u32())?;
                r.zero_u32(kind)?;
                ToTenant::Refused(reason)
            }
            Kind::Discard => {
                let batch = r.u64();
                let count = r.u32() as usize;
                r.zero_u32(kind)?;
                if !(1..=RANGES_MAX).contains(&count) || r.left() != count * 16 {
                    return Err(WireError::Count { count, bytes: r.left() });
                }
                let ranges = (0..count).map(|_| r.range()).collect::<Result<Vec<_>, _>>()?;
                ToTenant::Discard { batch, ranges }
            }
            Kind::Ack => {
                let code = r.u16();
                let of = Kind::from_code(code)
                    .filter(|k| {
                        matches!(
                            k,
                            Kind::RegionAdd
                                | Kind::RegionRemove
                                | Kind::Forked
                                | Kind::ProgramDiscard
                                | Kind::ForkChild
                        )
                    })
                    .ok_or(WireError::Ack { code })?;
                if r.u16() != 0 || r.u32() != 0 {
                    return Err(WireError::Reserved { kind });
                }
                ToTenant::Ack(of)
            }
            Kind::StatusReply => ToTenant::Status(DaemonStatus {
                pid: r.u32(),
                tenants: r.u32(),
                uptime_ms: r.u64(),
                memory_pages: r.u64(),
                granted_pages: r.u64(),
                resident_pages: r.u64(),
                swap_outs: r.u64(),
                swap_ins: r.u64(),
                lost_pages: r.u64(),
                host_pages_written: r.u64(),
                gc_pages_written: r.u64(),
                record_pages_written: r.u64(),
                zone_resets: r.u64(),
                device_bytes: r.u64(),
                compressed_pool_bytes: r.u64(),
                compressed_pool_pages_held: r.u64(),
                compressed_pool_pages_served: r.u64(),
                compressed_pool_stored_raw_bytes: r.u64(),
                compressed_pool_stored_bytes: r.u64(),
            }),
            Kind::ForkSnapshot => ToTenant::ForkSnapshot { token: Token(r.bytes()) },
            Kind::ForkPage => {
                let code = r.u32();
                let page = [ForkPage::Data, ForkPage::Zero, ForkPage::Lost]
                    .into_iter()
                    .find(|page| *page as u32 == code)
                    .ok_or(WireError::ForkPage { code })?;
                r.zero_u32(kind)?;
                ToTenant::ForkPage(page)
            }
            Kind::TenantStatus => {
                let (tenant, processes) = (r.u32(), r.u32());
                let name = Name::from_bytes(r.bytes())?;
                ToTenant::TenantStatus(TenantStatus {
                    tenant,
                    processes,
                    name,
                    processes_joined: r.u64(),
                    budget_pages: r.u64(),
                    resident_pages: r.u64(),
                    swap_outs: r.u64(),
                    swap_ins: r.u64(),
                    gc_bytes: r.u64(),
                    faults: r.u64(),
                    fault_p99_ns: r.u64(),
                    fault_handled_ns: r.u64(),
                    fault_lock_wait_ns: r.u64(),
                    fault_read_ns: r.u64(),
                    fault_reads: r.u64(),
                    fault_install_ns: r.u64(),
                    fault_room_wait_ns: r.u64(),
                    fault_other_wait_ns: r.u64(),
                    written_bytes: r.u64(),
                    write_limit: r.u64(),
                    throttled_ns: r.u64(),
                    grace_bytes: r.u64(),
                    swap_pages: r.u64(),
                    swap_limit_pages: r.u64(),
                })
            }
            _ => unreachable!("Reader::start checked the direction"),
        };
        r.finish();
        Ok(message)
    }
}

/// Writes one message: the header (its body's length filled in at `finish`), then the
/// body's fields in order.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> Writer<'a> {
    fn start(out: &'a mut Vec<u8>, kind: Kind) -> Writer<'a> {
        let start = out.len();
        out.extend_from_slice(&(kind as u16).to_le_bytes());
        out.extend_from_slice(&[0, 0]); // the body's length, at `finish`
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        Writer { out, start }
    }

    fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn bytes(&mut self, v: &[u8]) {
        self.out.extend_from_slice(v);
    }

    fn range(&mut self, range: Range) {
        self.u64(range.start);
        self.u64(range.len);
    }

    fn finish(self) {
        let body = self.out.len() - self.start - HEADER_BYTES;
        assert!(body + HEADER_BYTES <= MESSAGE_BYTES_MAX);
        self.out[self.start + 2..self.start + 4].copy_from_slice(&(body as u16).to_le_bytes());
    }
}

/// Reads one message's body, whose length `start` checked against its kind: the field
/// reads below cannot run past it.
struct Reader<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn start(bytes: &'a [u8], to_daemon: bool) -> Result<(Kind, Reader<'a>), WireError> {
        if bytes.len() < HEADER_BYTES {
            return Err(WireError::Short { bytes: bytes.len() });
        }
        let field = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let (code, body_len, version, reserved) = (field(0), field(2) as usize, field(4), field(6));
        let kind = Kind::from_code(code).filter(|k| k.to_daemon() == to_daemon).ok_or(WireError::Kind { code })?;
        if version != VERSION {
            return Err(WireError::Version { version });
        }
        if reserved != 0 {
            return Err(WireError::Reserved { kind });
        }
        let body = &bytes[HEADER_BYTES..];
        let fixed = kind.body_bytes();
        let fits = if kind == Kind::Discard { body.len() >= fixed } else { body.len() == fixed };
        if body.len() != body_len || !fits {
            return Err(WireError::Length { kind, bytes: body.len(), said: body_len, want: fixed });
        }
        Ok((kind, Reader { body, at: 0 }))
    }

    fn left(&self) -> usize {
        self.body.len() - self.at
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let v = self.body[self.at..self.at + N].try_into().expect("N bytes");
        self.at += N;
        v
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }

    fn zero_u32(&mut self, kind: Kind) -> Result<(), WireError> {
        if self.u32() != 0 {
            return Err(WireError::Reserved { kind });
        }
        Ok(())
    }

    fn range(&mut self) -> Result<Range, WireError> {
        let start = self.u64();
        let len = self.u64();
        Range::new(start, len)
    }

    fn finish(self) {
        debug_assert_eq!(self.at, self.body.len(), "every byte of the body read");
    }
}
