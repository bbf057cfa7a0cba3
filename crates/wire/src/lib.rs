//! What a tenant's processes and the znswap daemon say to each other (issue 34,
//! `docs/daemon.md`): the messages ([`ToDaemon`], [`ToTenant`]) as fixed-size records
//! with a decoder that refuses garbage, and the unix `SOCK_SEQPACKET` socket they travel
//! on ([`Channel`]), which keeps message boundaries and passes descriptors (a process's
//! userfaultfd and its `/proc/self/mem`).
//!
//! A daemon serves processes it does not trust: every message is decoded from a copy
//! of its bytes, checked whole before it is acted on, and a message that fails to
//! decode ends the connection. The descriptors a message carries must be exactly those
//! its kind takes; any others are closed.
//!
//! ```text
//!  tenant's process                         daemon
//!  Hello {pid, arena, join, memory}
//!    + uffd, mem, agent socket        ──▶ checks the peer (SO_PEERCRED), the tenant
//!                              ◀── Welcome {tenant, token, budget} | Refused(reason)
//!  RegionAdd / RegionRemove / Forked   ──▶
//!                                      ◀── Ack(kind)
//!  ProgramDiscard(range)               ──▶ frees its slots first, as a REMOVE event's
//!                                      ◀── Ack(ProgramDiscard)
//!  (zaps the range) Zapped {errno}     ──▶ lets go
//!  Bye                                 ──▶ (or the connection closes)
//!
//!  a launcher (znswap run --daemon), before its program starts:
//!  Open {name, memory, limits}         ──▶ a tenant, held while this connection is open
//!                              ◀── Welcome {tenant, token, budget} | Refused(reason)
//!  (its program's processes say Hello with the token, and join the tenant)
//!
//!  a process forking (on its calls), then its child (a connection of its own):
//!  Forking                             ──▶ where its pages on the device are, kept
//!                                      ◀── ForkSnapshot {token}
//!  (fork) Forked {child}               ──▶
//!                                      ◀── Ack(Forked)
//!  child: ForkChild {token} + memfd    ──▶ checks the child's parent
//!                                      ◀── Ack(ForkChild) | Refused
//!  child: ForkRead(page)               ──▶ reads it into the memfd
//!                                      ◀── ForkPage(Data | Zero | Lost)
//!
//!  anyone allowed (znswap status):
//!  Status                              ──▶
//!                              ◀── Status {daemon's figures, tenants}, TenantStatus × tenants
//!
//!  on the agent's socket:
//!                                      ◀── Discard {batch, ranges}
//!  (drops them) Discarded {batch}      ──▶
//! ```

// `is_multiple_of` is newer than the workspace's rust-version.
#![allow(clippy::manual_is_multiple_of)]

mod message;
mod socket;

pub use message::{
    DaemonStatus, ForkPage, Hello, Join, Kind, Name, Range, Reason, TenantStatus, ToDaemon, ToTenant, Token,
    MESSAGE_BYTES_MAX, NAME_BYTES, PAGE_BYTES, RANGES_MAX, TOKEN_BYTES, USER_END, VERSION,
};
pub use socket::{Channel, ChannelError, Listener, Peer, Received, FDS_MAX};

/// Why bytes received are not a message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("a message of {bytes} bytes is shorter than a header")]
    Short { bytes: usize },
    #[error("unknown message kind {code:#x} (or one that travels the other way)")]
    Kind { code: u16 },
    #[error("protocol version {version}, this side speaks {VERSION}")]
    Version { version: u16 },
    #[error("{kind:?}: reserved bytes are not zero")]
    Reserved { kind: Kind },
    #[error("{kind:?}: a body of {bytes} bytes, its header says {said}, its kind takes {want}")]
    Length { kind: Kind, bytes: usize, said: usize, want: usize },
    #[error("{kind:?}: unknown flags {flags:#x}")]
    Flags { kind: Kind, flags: u32 },
    #[error("the range {start:#x}+{len:#x} is refused: {why}")]
    Range { start: u64, len: u64, why: &'static str },
    #[error("the tenant's name is refused: {why}")]
    Name { why: &'static str },
    #[error("a discard of {count} ranges in {bytes} bytes (1 to {RANGES_MAX} ranges of 16 bytes)")]
    Count { count: usize, bytes: usize },
    #[error("unknown refusal reason {code}")]
    Reason { code: u32 },
    #[error("unknown fork page answer {code}")]
    ForkPage { code: u32 },
    #[error("an acknowledgement of kind {code:#x}, which is never acknowledged")]
    Ack { code: u16 },
    #[error("{kind:?} takes {want} descriptors, {got} came with it")]
    Fds { kind: Kind, want: usize, got: usize },
}
