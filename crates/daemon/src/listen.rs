//! Where the daemon listens: its socket bound (a stale one replaced, a live one
//! refused), connections accepted and each served on a thread of its own (at most
//! `CONNECTIONS_MAX` at once), and SIGINT or SIGTERM stopping it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use znswap_wire::{Channel, Listener, Reason, ToTenant};

use crate::daemon::{complain, Daemon, CONNECTIONS_MAX};
use crate::serve::serve_connection;

/// The daemon's socket when none is given: where `znswap run --daemon` looks too.
pub fn default_socket() -> PathBuf {
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/run/znswap/znswap.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("znswap.sock"),
        // SAFETY: as above.
        None => std::env::temp_dir().join(format!("znswap-{}.sock", unsafe { libc::geteuid() })),
    }
}

/// One connection served, counted while its thread runs, whichever way it ends.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// Binds the socket at `path`: its directory made, a stale socket (nobody answering)
/// replaced, a live one refused. Only this user may connect unless `open`.
pub(crate) fn bind(path: &Path, open: bool) -> Result<Listener> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if Channel::connect(path).is_ok() {
            bail!("a znswap daemon already listens at {} (stop it first, or give another --socket)", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let listener = Listener::bind(path, if open { 0o666 } else { 0o600 })
        .with_context(|| format!("listening at {}", path.display()))?;
    if open {
        // (The mode given to bind is cut by the umask.)
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
            .with_context(|| format!("opening {} to the users of --allow-uid", path.display()))?;
    }
    Ok(listener)
}

/// SIGINT and SIGTERM, blocked in the calling thread (and so in those it starts).
pub(crate) fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset; the mask is ours.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// SIGINT and SIGTERM (`set`, blocked everywhere) stop the daemon: its socket goes, and
/// so does it. (Its programs lose their swapped-out pages: they stop at their next
/// fault on one.)
pub(crate) fn stop_on_signals(set: libc::sigset_t, socket: PathBuf) -> Result<()> {
    std::thread::Builder::new()
        .name("znswap-signals".into())
        .spawn(move || {
            let mut signal = 0;
            // SAFETY: waits for one of the blocked signals.
            unsafe { libc::sigwait(&set, &mut signal) };
            let _ = std::fs::remove_file(&socket);
            eprintln!("znswap daemon: stopping (signal {signal})");
            std::process::exit(0);
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// Accepts connections for ever, each served on a thread of its own; past
/// `CONNECTIONS_MAX` open, a new one is refused (`Full`), said for the first and every
/// hundredth after.
pub(crate) fn accept(daemon: &Arc<Daemon>, listener: &Listener, allow_uids: &[u32]) -> ! {
    // SAFETY: no arguments.
    let own_uid = unsafe { libc::geteuid() };
    let connections = Arc::new(AtomicUsize::new(0));
    let mut refused = 0u64;
    loop {
        let channel = match listener.accept() {
            Ok(channel) => channel,
            Err(error) => {
                complain!(daemon, "accepting a connection: {error}");
                continue;
            }
        };
        if connections.load(Relaxed) >= CONNECTIONS_MAX {
            let _ = channel.send_to_tenant(&ToTenant::Refused(Reason::Full));
            refused += 1;
            // (A flood must not fill the log.)
            if refused % 100 == 1 {
                let pid = channel.peer().map_or(-1, |peer| peer.pid);
                complain!(
                    daemon,
                    "pid {pid} refused: {CONNECTIONS_MAX} connections are open ({refused} refused so far)"
                );
            }
            continue;
        }
        connections.fetch_add(1, Relaxed);
        let (serving, allowed, open) = (daemon.clone(), allow_uids.to_vec(), connections.clone());
        let spawned = std::thread::Builder::new().name("znswap-conn".into()).spawn(move || {
            let _counted = Counted(open);
            serve_connection(&serving, channel, |uid| uid == own_uid || uid == 0 || allowed.contains(&uid))
        });
        if let Err(error) = spawned {
            connections.fetch_sub(1, Relaxed);
            complain!(daemon, "a thread for a new connection: {error}");
        }
    }
}
