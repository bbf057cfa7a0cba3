//! One connection, by its first message: a launcher opening a tenant, a process joining
//! one (or a tenant of its own), a fork's child reading its parent's pages, or `znswap
//! status` asking.

use znswap_pager::PAGE_BYTES;
use znswap_wire::{Channel, Join, Name, Reason, ToDaemon, ToTenant, Token};
use znswap_zoned::format_size;

use crate::connection::{self, Arrival};
use crate::daemon::{complain, note, Daemon};
use crate::status;
use crate::tenants::Limits;

/// One connection, by its first message: a launcher opening a tenant, a process
/// joining one (or one of its own), or `znswap status` asking. Its user is checked first.
pub(crate) fn serve_connection(daemon: &Daemon, channel: Channel, allowed: impl Fn(u32) -> bool) {
    let peer = match channel.peer() {
        Ok(peer) => peer,
        Err(error) => return complain!(daemon, "a connection's peer: {error}"),
    };
    if !allowed(peer.uid) {
        let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::NotAllowed));
        return complain!(daemon, "pid {} of user {} refused: not allowed (--allow-uid)", peer.pid, peer.uid);
    }
    let pid = peer.pid as u32;
    match channel.recv_to_daemon() {
        // A launcher checking that the daemon is there.
        Ok(None) => {}
        Ok(Some((ToDaemon::Open { name, memory_pages, write_limit, swap_limit_pages }, _))) => {
            let asked = Limits {
                write: (write_limit > 0).then_some(write_limit),
                swap_pages: (swap_limit_pages > 0).then_some(swap_limit_pages),
            };
            serve_opener(daemon, &channel, pid, name, memory_pages, asked)
        }
        Ok(Some((ToDaemon::Status, _))) => serve_status(daemon, &channel),
        Ok(Some((ToDaemon::ForkChild { token }, mut fds))) => {
            let staging = fds.pop().expect("ForkChild comes with one descriptor");
            if let Err(error) = daemon.forks.serve_child(&channel, pid, token, staging) {
                complain!(daemon, "pid {pid}, a fork's child: {error}");
            }
        }
        Ok(Some((ToDaemon::Hello(hello), fds))) => match connection::take_hello(&channel, hello, fds, pid, 0) {
            Ok(arrival) => serve_process(daemon, &channel, pid, arrival),
            Err(error) => complain!(daemon, "pid {pid} refused: {error}"),
        },
        Ok(Some((message, _))) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::BadMessage));
            complain!(daemon, "pid {pid} refused: it began with {message:?}");
        }
        Err(error) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::BadMessage));
            complain!(daemon, "pid {pid} refused: {error}");
        }
    }
}

/// `znswap status`: the figures, as often as asked, until it hangs up.
fn serve_status(daemon: &Daemon, channel: &Channel) {
    loop {
        if status::send(daemon, channel).is_err() {
            return;
        }
        match channel.recv_to_daemon() {
            Ok(Some((ToDaemon::Status, _))) => {}
            _ => return,
        }
    }
}

/// A launcher's tenant (`znswap run --daemon`): granted, its token sent for its
/// program's processes to join with, held until the launcher hangs up (and its last
/// process leaves). The launcher may ask the figures meanwhile (for its summary).
fn serve_opener(daemon: &Daemon, channel: &Channel, pid: u32, name: Name, memory_pages: u64, asked: Limits) {
    let (index, pages, token) = match daemon.begin(&name, memory_pages, asked, true) {
        Ok(begun) => begun,
        Err(reason) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(reason));
            return daemon.refused(&format!("tenant {name:?} of pid {pid}"), memory_pages, reason);
        }
    };
    if channel.send_to_tenant(&ToTenant::Welcome { tenant: index, token, budget_pages: pages }).is_ok() {
        note!(
            daemon,
            "tenant {index} ({}) opened by pid {pid} with {} of memory{}",
            name.as_str(),
            format_size(pages * PAGE_BYTES as u64),
            daemon.limits_for(asked).describe()
        );
        loop {
            match channel.recv_to_daemon() {
                Ok(Some((ToDaemon::Status, _))) => {
                    if status::send(daemon, channel).is_err() {
                        break;
                    }
                }
                Ok(Some((ToDaemon::Bye, _)) | None) => break,
                Ok(Some((message, _))) => {
                    complain!(daemon, "tenant {index}'s launcher (pid {pid}) sent {message:?}; closing it");
                    break;
                }
                Err(error) => {
                    complain!(daemon, "tenant {index}'s launcher (pid {pid}): {error}; closing it");
                    break;
                }
            }
        }
    }
    let mut tenants = daemon.tenants.lock().unwrap();
    if let Some(gone) = tenants.close(index) {
        daemon.let_go(&tenants, gone);
    }
}

/// One process: joined to its tenant (or a tenant of its own), its heap served until
/// it leaves, then its slots freed; the tenant let go with its last process.
fn serve_process(daemon: &Daemon, channel: &Channel, pid: u32, arrival: Arrival) {
    let Arrival { hello, link } = arrival;
    let joined = match &hello.join {
        Join::New(name) => daemon.begin(name, hello.memory_pages, Limits::default(), false).map(|(index, pages, _)| {
            note!(
                daemon,
                "pid {pid} ({}) joined with {} of memory",
                name.as_str(),
                format_size(pages * PAGE_BYTES as u64)
            );
            (index, pages)
        }),
        Join::Tenant(token) | Join::ForkChild { tenant: token, .. } => {
            daemon.tenants.lock().unwrap().join(token).map(|tenant| (tenant.index, tenant.pages))
        }
    };
    let (index, pages) = match joined {
        Ok(joined) => joined,
        Err(reason) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(reason));
            return daemon.refused(&format!("pid {pid}"), hello.memory_pages, reason);
        }
    };
    // A fork's child: paged from the fork on, within its parent's tenant, reading the
    // pages then on the device from the fork's snapshot (held until it is let go here).
    let inherit = match hello.join {
        Join::ForkChild { fork, .. } => match daemon.forks.take(pid, fork) {
            Ok(snapshot) if snapshot.tenant() == index => Some((fork, snapshot)),
            taken => {
                let why = match taken {
                    Ok(_) => {
                        daemon.forks.release(&fork);
                        "its fork's parent is of another tenant".to_string()
                    }
                    Err(error) => error.to_string(),
                };
                let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::UnknownTenant));
                complain!(daemon, "pid {pid} (tenant {index}), a fork's child, refused: {why}");
                let mut tenants = daemon.tenants.lock().unwrap();
                if let Some(gone) = tenants.leave(index) {
                    daemon.let_go(&tenants, gone);
                }
                return;
            }
        },
        _ => None,
    };
    let link = znswap_pager::TenantLink { tenant: index, ..link };
    let added = match &inherit {
        Some((_, snapshot)) => daemon.pager.add_forked_tenant(link, snapshot),
        None => daemon.pager.add_tenant(link),
    };
    let paged = match added {
        Ok(id) => {
            // (The token is the tenant's: a process that joined by it has it already.)
            let welcome = ToTenant::Welcome { tenant: index, token: Token([0; 16]), budget_pages: pages };
            if channel.send_to_tenant(&welcome).is_ok() {
                if let Err(error) = connection::serve_calls(&daemon.pager, id, pid, channel, Some(&daemon.forks)) {
                    complain!(daemon, "pid {pid} (tenant {index}) let go: {error}");
                }
            }
            daemon.pager.remove_tenant(id);
            true
        }
        Err(error) => {
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::Full));
            complain!(daemon, "pid {pid} (tenant {index}) cannot be served: {error}");
            false
        }
    };
    if let Some((fork, _)) = inherit {
        if paged {
            // Its region is gone: the slots it inherited may be reset now.
            daemon.forks.release(&fork);
        } else {
            // Not paged here, it serves its own heap and reads its parent's pages from
            // the snapshot (let go when it exits).
            daemon.forks.give_back(&fork);
        }
    }
    let mut tenants = daemon.tenants.lock().unwrap();
    if let Some(gone) = tenants.leave(index) {
        daemon.let_go(&tenants, gone);
    }
}
