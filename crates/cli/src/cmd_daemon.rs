//! `znswap daemon`: its flags, and the daemon started with them (`znswap-daemon`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use znswap_pager::PagerConfig;

use crate::device_path;
use crate::flags::{rate, size, DeviceFlag, PagerFlags};

#[derive(Args)]
pub struct DaemonArgs {
    #[command(flatten)]
    device: DeviceFlag,
    /// Resident memory the served programs' paged heaps hold together (e.g. 1G). Each
    /// program asks for its share with `znswap run --daemon --memory M` and is refused
    /// when the shares granted would pass this.
    #[arg(long, value_parser = size, default_value = "1G")]
    memory: u64,
    #[command(flatten)]
    pager: PagerFlags,
    /// The unix socket programs connect to [default: /run/znswap/znswap.sock as root,
    /// else $XDG_RUNTIME_DIR/znswap.sock]. Only this user (and root) may connect,
    /// unless --allow-uid says who else.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also serve programs of this user id (repeatable): the socket is then open to
    /// all, and each connection's user (SO_PEERCRED) is checked.
    #[arg(long = "allow-uid", value_name = "UID")]
    allow_uids: Vec<u32>,
    /// Each tenant's share of the device's writes: at most RATE bytes a second (e.g.
    /// 8M) of its swap-outs and of the GC's moves of its pages together, so a tenant
    /// pays for the GC its rewrites cause (with --policy tenant, only its own data is
    /// moved for it). Past its share a tenant's pages stay until its allowance catches
    /// up, and its faults wait: it slows, the others do not. A program may ask for less
    /// (`znswap run --daemon --write-limit`) [default: no limit]
    #[arg(long, value_name = "RATE", value_parser = rate)]
    write_limit: Option<u64>,
    /// Each tenant's swap limit: at most SIZE of its pages on the device (swapped out, or
    /// kept as their swap cache), so that no tenant fills the device the others swap to.
    /// At it, a tenant's pages stay in memory past its --memory (said once in the log). A
    /// program may ask for less (`znswap run --daemon --swap-limit`) [default: no limit]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    swap_limit: Option<u64>,
}

pub fn run(args: DaemonArgs) -> Result<()> {
    let mut pager = PagerConfig::for_daemon(args.memory);
    args.pager.apply(&mut pager);
    // Refused before the device is opened.
    znswap_daemon::check(&pager)?;
    let device_name = args.device.device.clone().unwrap_or_else(device_path::default_path);
    let device = device_path::open(args.device.device.as_deref())?;
    znswap_daemon::run(znswap_daemon::DaemonConfig {
        device,
        device_name,
        memory: args.memory,
        pager,
        socket: args.socket.clone().unwrap_or_else(znswap_daemon::default_socket),
        socket_given: args.socket.is_some(),
        allow_uids: args.allow_uids,
        write_limit: args.write_limit,
        swap_limit_pages: args.swap_limit.map(crate::flags::swap_limit_pages),
    })
}
