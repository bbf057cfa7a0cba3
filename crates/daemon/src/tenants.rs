//! The daemon's tenants: who holds what of its memory, and which processes belong to
//! whom. A tenant is a program and every process it executes (`znswap run --daemon`
//! opens one for the program it starts; the program's processes join it with its
//! token), or a lone process that said `Hello` as a tenant of its own. Each is one of
//! the engine's tenants (its swap-zones under the tenant policy, its GC bill) and holds
//! a grant of the daemon's `--memory`, which its pages are held to together.
//!
//! ```text
//!   open (a launcher's Open)      ──▶ granted, no process yet, held by its opener
//!   new  (a process's own Hello)  ──▶ granted, one process, held by that process
//!   join (a Hello with the token) ──▶ one more process
//!   leave (a process gone) / close (its opener gone)
//!        ──▶ let go once no process is left and its opener (if any) is gone
//! ```
//!
//! Plain bookkeeping, no I/O: the daemon's connection threads call it under one lock.

use znswap_pager::{TenantFigures, PAGE_BYTES};
use znswap_wire::{Name, Reason, Token};
use znswap_zoned::format_size;

/// Tenants served at once at most: the engine's tenants.
pub const TENANTS_MAX: u32 = znswap_pager::DAEMON_TENANTS_MAX;

pub struct Tenant {
    /// The engine's tenant.
    pub index: u32,
    pub name: Name,
    /// Its grant of the daemon's memory, in pages.
    pub pages: u64,
    token: Token,
    /// Its opener's connection is open (a launcher's `Open`).
    opened: bool,
    /// Its processes served now, and since it began.
    pub processes: u32,
    pub joined: u64,
    /// The engine tenant's figures when it began (an index is used again by later
    /// tenants; the figures are counted since the pager started).
    pub since: TenantFigures,
}

impl Tenant {
    /// Its figures since it began, from the engine tenant's `now`.
    pub fn figures(&self, now: TenantFigures) -> TenantFigures {
        TenantFigures {
            swap_outs: now.swap_outs - self.since.swap_outs,
            swap_ins: now.swap_ins - self.since.swap_ins,
            gc_bytes: now.gc_bytes - self.since.gc_bytes,
            written_bytes: now.written_bytes - self.since.written_bytes,
            throttled_ns: now.throttled_ns - self.since.throttled_ns,
            grace_bytes: now.grace_bytes - self.since.grace_bytes,
            ..now
        }
    }
}

pub struct Tenants {
    pool_pages: u64,
    /// The pager's smallest budget, in pages: no grant is smaller.
    floor_pages: u64,
    tenants: Vec<Tenant>,
}

impl Tenants {
    pub fn new(pool_pages: u64, floor_pages: u64) -> Tenants {
        Tenants { pool_pages, floor_pages, tenants: Vec::new() }
    }

    pub fn pool_pages(&self) -> u64 {
        self.pool_pages
    }

    pub fn granted_pages(&self) -> u64 {
        self.tenants.iter().map(|tenant| tenant.pages).sum()
    }

    /// The pager's budget: what is granted, but never below its floor.
    pub fn budget_pages(&self) -> u64 {
        self.granted_pages().max(self.floor_pages)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Tenant> {
        self.tenants.iter()
    }

    pub fn get(&self, index: u32) -> Option<&Tenant> {
        self.tenants.iter().find(|tenant| tenant.index == index)
    }

    /// A new tenant granted `pages` (at least the floor): opened by a launcher
    /// (`opened`), or a lone process's, which counts as its first process. `since`: the
    /// engine tenant's figures now, by its index.
    pub fn begin(
        &mut self,
        name: &Name,
        pages: u64,
        opened: bool,
        token: Token,
        since: impl FnOnce(u32) -> TenantFigures,
    ) -> Result<&Tenant, Reason> {
        let pages = pages.max(self.floor_pages);
        if self.granted_pages() + pages > self.pool_pages {
            return Err(Reason::NoMemory);
        }
        let index = (0..TENANTS_MAX).find(|&index| self.get(index).is_none()).ok_or(Reason::Full)?;
        let processes = u32::from(!opened);
        self.tenants.push(Tenant {
            index,
            name: name.clone(),
            pages,
            token,
            opened,
            processes,
            joined: processes as u64,
            since: since(index),
        });
        Ok(self.tenants.last().expect("just pushed"))
    }

    /// A process joins the tenant `token` names.
    pub fn join(&mut self, token: &Token) -> Result<&Tenant, Reason> {
        let tenant = self.tenants.iter_mut().find(|tenant| tenant.token == *token).ok_or(Reason::UnknownTenant)?;
        tenant.processes += 1;
        tenant.joined += 1;
        Ok(tenant)
    }

    /// A process of tenant `index` is gone. Returns the tenant if it was let go with it.
    pub fn leave(&mut self, index: u32) -> Option<Tenant> {
        let tenant = self.tenants.iter_mut().find(|tenant| tenant.index == index).expect("a tenant served");
        assert!(tenant.processes > 0, "tenant {index} left by more processes than joined it");
        tenant.processes -= 1;
        self.let_go_if_done(index)
    }

    /// Tenant `index`'s opener is gone. Returns the tenant if it was let go with it.
    pub fn close(&mut self, index: u32) -> Option<Tenant> {
        let tenant = self.tenants.iter_mut().find(|tenant| tenant.index == index).expect("a tenant served");
        assert!(tenant.opened, "tenant {index} closed but never opened");
        tenant.opened = false;
        self.let_go_if_done(index)
    }

    fn let_go_if_done(&mut self, index: u32) -> Option<Tenant> {
        let at = self.tenants.iter().position(|tenant| tenant.index == index)?;
        let tenant = &self.tenants[at];
        (tenant.processes == 0 && !tenant.opened).then(|| self.tenants.swap_remove(at))
    }
}

#[cfg(test)]
mod tests {
    use super::{Name, Reason, TenantFigures, Tenants, Token, TENANTS_MAX};

    fn name(name: &str) -> Name {
        Name::new(name).unwrap()
    }

    fn token(byte: u8) -> Token {
        Token([byte; 16])
    }

    #[test]
    fn a_tenant_holds_its_grant_while_its_opener_or_a_process_is_there() {
        let mut tenants = Tenants::new(1000, 10);
        let make = tenants.begin(&name("make"), 300, true, token(1), |_| TenantFigures::default()).unwrap().index;
        assert_eq!(tenants.granted_pages(), 300);
        // Its processes join by token; a wrong token joins nothing.
        assert_eq!(tenants.join(&token(1)).unwrap().processes, 1);
        assert_eq!(tenants.join(&token(1)).unwrap().processes, 2);
        assert!(matches!(tenants.join(&token(9)), Err(Reason::UnknownTenant)));
        assert!(tenants.leave(make).is_none());
        // Its opener gone, the last process still holds it.
        assert!(tenants.close(make).is_none());
        let gone = tenants.leave(make).expect("let go with its last process");
        assert_eq!((gone.name.as_str(), gone.joined), ("make", 2));
        assert_eq!(tenants.granted_pages(), 0);
        assert!(matches!(tenants.join(&token(1)), Err(Reason::UnknownTenant)), "its token dies with it");
        // A lone process is a tenant of its own, let go when it leaves.
        let lone = tenants.begin(&name("redis"), 5, false, token(2), |_| TenantFigures::default()).unwrap();
        assert_eq!((lone.pages, lone.processes), (10, 1), "the floor, and itself");
        let lone = lone.index;
        assert!(tenants.leave(lone).is_some());
        assert_eq!(tenants.budget_pages(), 10, "the pager's floor when nothing is granted");
    }

    #[test]
    fn grants_fit_the_pool_and_the_engines_tenants() {
        let mut tenants = Tenants::new(100, 1);
        let first = tenants.begin(&name("a"), 60, true, token(1), |_| TenantFigures::default()).unwrap().index;
        assert!(matches!(
            tenants.begin(&name("b"), 41, true, token(2), |_| TenantFigures::default()),
            Err(Reason::NoMemory)
        ));
        let second = tenants.begin(&name("b"), 40, true, token(2), |_| TenantFigures::default()).unwrap().index;
        assert_ne!(first, second);
        tenants.close(first).unwrap();
        // Its index is used again; figures count from the new tenant's start.
        let since = TenantFigures {
            swap_outs: 7,
            swap_ins: 3,
            gc_bytes: 4096,
            written_bytes: 4096,
            throttled_ns: 100,
            ..TenantFigures::default()
        };
        let third = tenants.begin(&name("c"), 10, true, token(3), |index| {
            assert_eq!(index, first);
            since
        });
        let now = TenantFigures {
            swap_outs: 10,
            swap_ins: 3,
            gc_bytes: 8192,
            resident_pages: 5,
            kept_pages: 4,
            written_bytes: 12288,
            write_limit: Some(1 << 20),
            throttled_ns: 250,
            ..TenantFigures::default()
        };
        let figures = third.unwrap().figures(now);
        assert_eq!((figures.swap_outs, figures.swap_ins, figures.gc_bytes, figures.resident_pages), (3, 0, 4096, 5));
        assert_eq!((figures.written_bytes, figures.throttled_ns, figures.write_limit), (8192, 150, Some(1 << 20)));
        let mut full = Tenants::new(u64::MAX, 1);
        for index in 0..TENANTS_MAX {
            full.begin(&name("x"), 1, true, token(index as u8), |_| TenantFigures::default()).unwrap();
        }
        assert!(matches!(full.begin(&name("y"), 1, true, token(99), |_| TenantFigures::default()), Err(Reason::Full)));
    }
}

/// A tenant's limits on the device (`None`: none).
#[derive(Clone, Copy, Default)]
pub struct Limits {
    /// Bytes a second of its swap-outs and GC moves (`--write-limit`).
    pub write: Option<u64>,
    /// Pages on the device (`--swap-limit`).
    pub swap_pages: Option<u64>,
}

impl Limits {
    /// `, writing at most 8 MiB/s, swapping at most 1 GiB`, or nothing.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        if let Some(rate) = self.write {
            out += &format!(", writing at most {}/s", format_size(rate));
        }
        if let Some(pages) = self.swap_pages {
            out += &format!(", swapping at most {}", format_size(pages * PAGE_BYTES as u64));
        }
        out
    }
}

/// The smaller of two limits, either absent.
pub fn smaller(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `1 process`, `2 processes`.
pub fn plural(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}
