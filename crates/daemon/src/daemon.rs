//! The daemon: one zoned device for many programs (`docs/daemon.md`).
//! The daemon owns the device and one pager (`Pager::serve`), and serves every program
//! started with `znswap run --daemon` over a unix socket: each program's library hands
//! its heap over (its userfaultfd, `/proc/self/mem`, an agent socket), and the daemon's
//! fault handlers, evictor and GC page it with everyone else's.
//!
//! Memory: `--memory` is what the served heaps may hold resident together. A tenant (a
//! program and every program it executes: `tenants.rs`) asks for its own
//! `--memory`, granted while the grants fit (else refused with a message); the pager's
//! budget is the sum granted, and each tenant's pages are held to its own grant
//! (`Pager::set_tenant_budget`: each is an engine tenant of its own). A fork's child is
//! paged within its parent's tenant, reading the pages its parent had swapped out from
//! a snapshot the daemon keeps of the fork (`connection::ForkRegistry`). `znswap status`
//! asks the figures on the same socket.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use znswap_pager::{Pager, PAGE_BYTES};
use znswap_wire::{Name, Reason, Token};
use znswap_zoned::format_size;

use crate::connection::ForkRegistry;
use crate::tenants::{plural, smaller, Limits, Tenant, Tenants, TENANTS_MAX};

/// Connections served at once at most: each is a thread, serving its requests one at a
/// time (so a process has one in flight). A tenant holds one, each of its processes one
/// and each fork's child one more while it reads its parent's snapshot: four per process
/// is room to spare, and a peer opening connections without end is refused past it
/// rather than starting threads without end.
pub(crate) const CONNECTIONS_MAX: usize = 4 * znswap_pager::DAEMON_PROCESSES_MAX as usize;

/// What every connection's thread shares.
pub(crate) struct Daemon {
    pub(crate) pager: Pager,
    /// Snapshots its processes' forks' children read.
    pub(crate) forks: Arc<ForkRegistry>,
    pub(crate) tenants: Mutex<Tenants>,
    pub(crate) started: Instant,
    pub(crate) device_bytes: u64,
    /// `--write-limit`: each tenant's at most, bytes a second.
    pub(crate) write_limit: Option<u64>,
    /// `--swap-limit`: each tenant's at most, in pages.
    pub(crate) swap_limit_pages: Option<u64>,
    /// How it speaks in the log: its name there, and whether it says tenants' comings
    /// and goings (a launcher serving its own program's tree says only what went wrong).
    pub(crate) log: Log,
}

/// The daemon's voice in the log.
#[derive(Clone, Copy)]
pub(crate) struct Log {
    pub(crate) name: &'static str,
    pub(crate) chatty: bool,
}

/// What went wrong, always said, as `NAME: message`.
macro_rules! complain {
    ($daemon:expr, $($arg:tt)*) => {
        eprintln!("{}: {}", $daemon.log.name, format_args!($($arg)*))
    };
}

/// Tenants coming and going, said when the daemon is chatty.
macro_rules! note {
    ($daemon:expr, $($arg:tt)*) => {
        if $daemon.log.chatty {
            eprintln!("{}: {}", $daemon.log.name, format_args!($($arg)*))
        }
    };
}

pub(crate) use {complain, note};

impl Daemon {
    /// The pager's budget and tenant `index`'s memory and limits (`None`: let go) after
    /// the grants moved.
    pub(crate) fn set_budgets(&self, tenants: &Tenants, index: u32, grant: Option<(u64, Limits)>) {
        let budget = self.pager.set_budget(tenants.budget_pages() * PAGE_BYTES as u64);
        let tenant = self.pager.set_tenant_budget(index, grant.map(|(pages, _)| pages * PAGE_BYTES as u64));
        let limits = grant.map(|(_, limits)| limits).unwrap_or_default();
        let writes = self.pager.set_tenant_write_limit(index, limits.write);
        let swap = self.pager.set_tenant_swap_limit(index, limits.swap_pages.map(|pages| pages * PAGE_BYTES as u64));
        if let Err(error) = budget.and(tenant).and(writes).and(swap) {
            complain!(self, "the budget: {error}");
        }
    }

    /// The limits a tenant asking `asked` (0: none of its own) gets: for each, the
    /// smaller of its own and the daemon's.
    pub(crate) fn limits_for(&self, asked: Limits) -> Limits {
        Limits {
            write: smaller(self.write_limit, asked.write),
            swap_pages: smaller(self.swap_limit_pages, asked.swap_pages),
        }
    }

    /// Begins a tenant (see `Tenants::begin`), its budget set: its index, grant and token.
    pub(crate) fn begin(
        &self,
        name: &Name,
        pages: u64,
        limits: Limits,
        opened: bool,
    ) -> Result<(u32, u64, Token), Reason> {
        let token = Token::random().map_err(|_| Reason::Full)?;
        let mut tenants = self.tenants.lock().unwrap();
        let tenant = tenants.begin(name, pages, opened, token, |index| {
            // (No process of the index is served: its latencies are a former tenant's.)
            self.pager.tenant_begins(index);
            self.pager.tenant_figures(index)
        })?;
        let (index, pages) = (tenant.index, tenant.pages);
        self.set_budgets(&tenants, index, Some((pages, self.limits_for(limits))));
        Ok((index, pages, token))
    }

    /// Says why a tenant was refused, with what is granted.
    pub(crate) fn refused(&self, who: &str, pages: u64, reason: Reason) {
        let tenants = self.tenants.lock().unwrap();
        complain!(
            self,
            "{who} refused ({reason:?}): it asks for {}, and {} of {} is granted to {} tenants",
            format_size(pages * PAGE_BYTES as u64),
            format_size(tenants.granted_pages() * PAGE_BYTES as u64),
            format_size(tenants.pool_pages() * PAGE_BYTES as u64),
            tenants.iter().count()
        );
    }

    /// Tenant `index` let go (`Tenants::leave`, `close`): its budget lifted, its figures
    /// said.
    pub(crate) fn let_go(&self, tenants: &Tenants, gone: Tenant) {
        self.set_budgets(tenants, gone.index, None);
        let figures = gone.figures(self.pager.tenant_figures(gone.index));
        let stats = self.pager.stats();
        note!(
            self,
            "tenant {} ({}) closed: {} served, {} pages swapped out, {} in, {} moved by GC; all \
             programs so far: {} pages swapped out, {} in, {} lost",
            gone.index,
            gone.name.as_str(),
            plural(gone.joined, "process", "processes"),
            figures.swap_outs,
            figures.swap_ins,
            format_size(figures.gc_bytes),
            self.swapped_out_pages(),
            stats.core.swap_in_reads,
            stats.core.lost_pages
        );
    }

    /// Pages swapped out since the start, counted as the tenants' are.
    pub(crate) fn swapped_out_pages(&self) -> u64 {
        (0..TENANTS_MAX).map(|index| self.pager.tenant_figures(index).swap_outs).sum()
    }
}
