//! A served process's connection, the pager's side (`docs/daemon.md`): its `Hello`
//! taken and checked, then its calls served until it leaves. `znswap daemon` and `znswap
//! run --serve` both serve processes so.

use znswap_wire::{Channel, Hello, Kind, Reason, ToDaemon, ToTenant};

use crate::{Pager, TenantId, TenantLink};

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
    Link(#[from] crate::TenantError),
    #[error("it sent {0:?}, which is not served")]
    Unexpected(Box<ToDaemon>),
    #[error(transparent)]
    Channel(#[from] znswap_wire::ChannelError),
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
/// each of its discards is taken into the pager's state, which is held while the
/// process zaps the range (`Pager::tenant_discard_then`). An error is a process that
/// broke the protocol: it is to be let go.
pub fn serve_calls(pager: &Pager, id: TenantId, channel: &Channel) -> Result<(), ConnectionError> {
    loop {
        match channel.recv_to_daemon()? {
            Some((ToDaemon::ProgramDiscard(range), _)) => {
                let mut broke = None;
                pager.tenant_discard_then(id, range.start(), range.len(), || {
                    // The process zaps while the pager's state is held.
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
            Some((ToDaemon::Bye, _)) | None => return Ok(()),
            Some((message, _)) => return Err(ConnectionError::Unexpected(Box::new(message))),
        }
    }
}
