//! Tenants: the engine's tenants as the pager holds them to their shares. Each region is
//! charged to one (`PagerCore::region_add`); a daemon serving many programs gives each
//! its own. A tenant may have a budget of its own within the pager's
//! (`set_tenant_budget`), a share of the device's writes (`set_tenant_write_limit`,
//! `src/write_limit.rs`) and a swap limit (`set_tenant_swap_limit`); its swap cache is
//! judged on its own outcomes (`src/swap_cache.rs`).
//!
//! [`Tenants`] keeps one [`Tenant`] per engine tenant and, beside them, whether any has a
//! budget, a write limit or a swap limit: most pagers have none, and the evictor and
//! faults then skip every per-tenant question. Its methods keep those summaries true of
//! the tenants (asserted in debug builds).

use znswap_core::Engine;

use crate::swap_cache::SwapCacheFeedback;
use crate::write_limit::WriteLimit;
use crate::{CoreError, PagerCore};

/// One tenant's figures (`PagerCore::tenant_figures`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantFigures {
    /// Its pages counted resident, and those of them kept (not on their way out).
    pub resident_pages: u64,
    pub kept_pages: u64,
    /// Its pages swapped out (gone from memory, their data on the device: written, or
    /// still there from an earlier write), and pages read back from the device for its
    /// faults (read-ahead included).
    pub swap_outs: u64,
    pub swap_ins: u64,
    /// Bytes its swap-outs wrote (appended pages).
    pub written_bytes: u64,
    /// Bytes of its data the GC moved: charged to it (the paper's §4.3).
    pub gc_bytes: u64,
    /// Its share of the device's writes, bytes a second (`set_tenant_write_limit`).
    pub write_limit: Option<u64>,
    /// Its slots in use (its pages on the device and its swap cache), and its swap limit
    /// in slots (`set_tenant_swap_limit`).
    pub swap_slots: u64,
    pub swap_limit: Option<u64>,
    /// How long its swap-outs waited for that share (nanoseconds), and the bytes it was
    /// let through past its share when held back longest (`src/write_limit.rs`).
    pub throttled_ns: u64,
    pub grace_bytes: u64,
}

/// `tenant`'s entry of one of the engine's per-tenant counts (0 past the engine's
/// tenants).
pub(crate) fn of_tenant(counts: &[u64], tenant: u32) -> u64 {
    counts.get(tenant as usize).copied().unwrap_or(0)
}

/// One tenant's state in the pager.
#[derive(Clone, Debug)]
pub(crate) struct Tenant {
    /// Its own budget in pages (`set_tenant_budget`; `u64::MAX`: none, only the pager's).
    budget_pages: u64,
    /// Its pages counted resident and kept: its live regions' `resident` and `kept`,
    /// summed as `PagerCore::set_state` changes them.
    resident_pages: u64,
    kept_pages: u64,
    /// Its pages swapped out and read back (`TenantFigures`).
    swap_outs: u64,
    swap_ins: u64,
    /// Its share of the device's writes (`set_tenant_write_limit`).
    write_limit: WriteLimit,
    /// Its swap limit in slots (`set_tenant_swap_limit`; `u64::MAX`: none), and whether
    /// its reaching it was said (`Notice::TenantSwapFull`).
    swap_limit_slots: u64,
    swap_limit_said: bool,
    /// Passed over by the last eviction round, which picked nothing for it
    /// (`Tenants::held_back`).
    held: bool,
    /// Whether its pages read back keep their slots.
    swap_cache: SwapCacheFeedback,
}

impl Default for Tenant {
    fn default() -> Tenant {
        Tenant {
            budget_pages: u64::MAX,
            resident_pages: 0,
            kept_pages: 0,
            swap_outs: 0,
            swap_ins: 0,
            write_limit: WriteLimit::default(),
            swap_limit_slots: u64::MAX,
            swap_limit_said: false,
            held: false,
            swap_cache: SwapCacheFeedback::default(),
        }
    }
}

impl Tenant {
    fn has_budget(&self) -> bool {
        self.budget_pages != u64::MAX
    }

    fn has_swap_limit(&self) -> bool {
        self.swap_limit_slots != u64::MAX
    }
}

/// Every tenant, by its engine index, and what any of them has.
pub(crate) struct Tenants {
    tenants: Vec<Tenant>,
    /// Some tenant has a budget of its own.
    budgeted: bool,
    /// Some tenant has a write limit.
    write_limited: bool,
    /// Some tenant has a swap limit.
    swap_limited: bool,
    /// The last eviction round found only pages of tenants past their write limits or at
    /// their swap limits, and those it held are marked (`Tenant::held`): until its wait's
    /// timeout, only work beside them wakes the evictor.
    held_back: bool,
}

impl Tenants {
    pub(crate) fn new(count: u32) -> Tenants {
        Tenants {
            tenants: vec![Tenant::default(); count as usize],
            budgeted: false,
            write_limited: false,
            swap_limited: false,
            held_back: false,
        }
    }

    pub(crate) fn len(&self) -> u32 {
        self.tenants.len() as u32
    }

    /// `Ok` if `tenant` is one of them.
    pub(crate) fn check_tenant(&self, tenant: u32) -> Result<(), CoreError> {
        let tenants = self.len();
        if tenant >= tenants {
            return Err(CoreError::NoSuchTenant { tenant, tenants });
        }
        Ok(())
    }

    /// The summaries against the tenants (debug builds, after every change of either).
    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            self.check();
        }
    }

    /// Panics if a summary disagrees with the tenants.
    pub(crate) fn check(&self) {
        let any = |has: fn(&Tenant) -> bool| self.tenants.iter().any(has);
        assert_eq!(self.budgeted, any(Tenant::has_budget), "whether any tenant has a budget");
        assert_eq!(self.write_limited, any(|t| t.write_limit.rate().is_some()), "whether any has a write limit");
        assert_eq!(self.swap_limited, any(Tenant::has_swap_limit), "whether any tenant has a swap limit");
        assert_eq!(self.held_back, any(|t| t.held), "whether the last round held any tenant back");
    }

    // ------------------------------------------------------------- budgets

    /// Sets `tenant`'s own budget (`u64::MAX`: none); whether it grew.
    pub(crate) fn set_budget(&mut self, tenant: u32, budget_pages: u64) -> bool {
        let slot = &mut self.tenants[tenant as usize].budget_pages;
        let grew = budget_pages > *slot;
        *slot = budget_pages;
        self.budgeted = self.tenants.iter().any(Tenant::has_budget);
        self.debug_check();
        grew
    }

    /// `tenant`'s pages counted resident, and those of them kept.
    pub(crate) fn pages(&self, tenant: u32) -> (u64, u64) {
        let tenant = &self.tenants[tenant as usize];
        (tenant.resident_pages, tenant.kept_pages)
    }

    /// A page of `tenant`'s changed state: `resident` and `kept` are the changes of its
    /// counts (-1, 0 or 1).
    pub(crate) fn count_pages(&mut self, tenant: u32, resident: i64, kept: i64) {
        let tenant = &mut self.tenants[tenant as usize];
        tenant.resident_pages = tenant.resident_pages.wrapping_add_signed(resident);
        tenant.kept_pages = tenant.kept_pages.wrapping_add_signed(kept);
    }

    /// A region of `tenant`'s with `resident` and `kept` pages went.
    pub(crate) fn uncount_region(&mut self, tenant: u32, resident: u64, kept: u64) {
        let tenant = &mut self.tenants[tenant as usize];
        tenant.resident_pages -= resident;
        tenant.kept_pages -= kept;
    }

    /// Room for `tenant` to map pages: its budget and its share of the slack less its
    /// resident pages (`u64::MAX` without a budget of its own).
    ///
    /// The share is the slack in proportion to the tenant's part of the pager's budget,
    /// so that tenants whose budgets add up to the pager's fill the pager's budget and
    /// slack together exactly: a tenant within its own room never waits on the pager's.
    /// With the whole slack each, two tenants at their budgets filled the pager's slack
    /// between them, and a reader's faults then waited for room at the pager's budget
    /// while a writer held back by its write limit sat in its own slack
    /// (`scripts/tenants.sh`; figures: docs/measurements/2026-11-daemon.md).
    pub(crate) fn room(&self, tenant: u32, pager_budget_pages: u64, slack_pages: u64) -> u64 {
        let tenant = &self.tenants[tenant as usize];
        let budget = tenant.budget_pages;
        if budget == u64::MAX {
            return u64::MAX;
        }
        let pager_budget = pager_budget_pages.max(1);
        let slack = slack_pages * budget.min(pager_budget) / pager_budget;
        (budget + slack).saturating_sub(tenant.resident_pages)
    }

    /// Whether `tenant` keeps more pages than its low watermark, `batch_pages` under its
    /// own budget: eviction then takes its pages first.
    /// (Not a tenant at its swap limit: none of its pages may go.)
    pub(crate) fn over(&self, tenant: u32, batch_pages: u64, engine: &Engine) -> bool {
        let state = &self.tenants[tenant as usize];
        state.has_budget()
            && state.kept_pages > state.budget_pages.saturating_sub(batch_pages)
            && !self.swap_full(tenant, engine)
    }

    /// Whether any tenant is over its own budget (`over`).
    pub(crate) fn any_over(&self, batch_pages: u64, engine: &Engine) -> bool {
        self.budgeted && (0..self.len()).any(|tenant| self.over(tenant, batch_pages, engine))
    }

    // ------------------------------------------------------ the evictor's holds

    /// Which tenants the evictor passes over now (`held[tenant]`): those past their
    /// write limits (each allowance brought to `now`) or at their swap limits. Returns
    /// whether any is.
    pub(crate) fn find_held(&mut self, held: &mut Vec<bool>, engine: &Engine, now: u64) -> bool {
        held.clear();
        if !self.write_limited && !self.swap_limited {
            return false;
        }
        let mut any = false;
        for tenant in 0..self.len() {
            let throttled = self.write_limited && {
                let charged = charged_bytes(engine, tenant);
                self.tenants[tenant as usize].write_limit.wait_ns(charged, now) > 0
            };
            let at_limit = self.swap_full(tenant, engine);
            held.push(throttled || at_limit);
            any |= throttled || at_limit;
        }
        any
    }

    /// The last round picked nothing, passing over the tenants `held` marks
    /// (`find_held`'s): the evictor is held back by them.
    pub(crate) fn hold_back(&mut self, held: &[bool]) {
        assert_eq!(held.len(), self.tenants.len(), "a hold names every tenant");
        for (tenant, &held) in self.tenants.iter_mut().zip(held) {
            tenant.held = held;
        }
        self.held_back = held.iter().any(|&held| held);
        self.debug_check();
    }

    /// What the last round held no longer narrows who wakes the evictor.
    pub(crate) fn release_hold(&mut self) {
        if self.held_back {
            for tenant in &mut self.tenants {
                tenant.held = false;
            }
            self.held_back = false;
        }
        self.debug_check();
    }

    /// Whether the evictor is held back by tenants (`hold_back`).
    pub(crate) fn held_back(&self) -> bool {
        self.held_back
    }

    /// Whether a round would now find pages to pick beside the tenants the last one held
    /// (`evict_pick`'s choice, with those tenants passed over): a tenant over its budget
    /// and not held, or, with no tenant over, the pager over its low watermark.
    pub(crate) fn picks_beside_held(&self, batch_pages: u64, engine: &Engine) -> bool {
        if !self.budgeted {
            return true;
        }
        let tenants = self.len();
        if (0..tenants).any(|tenant| self.over(tenant, batch_pages, engine) && !self.tenants[tenant as usize].held) {
            return true;
        }
        !self.any_over(batch_pages, engine)
    }

    // ----------------------------------------------------------- write limits

    /// Limits what `tenant` writes to `bytes_per_s` (`None`: none), charged `charged` so
    /// far, from `now`.
    pub(crate) fn set_write_limit(&mut self, tenant: u32, bytes_per_s: Option<u64>, charged: u64, now: u64) {
        self.tenants[tenant as usize].write_limit.set(bytes_per_s, charged, now);
        self.write_limited = self.tenants.iter().any(|tenant| tenant.write_limit.rate().is_some());
        self.debug_check();
    }

    /// Whether `tenant` is held back by its write limit (as the evictor last found it).
    pub(crate) fn write_throttled(&self, tenant: u32) -> bool {
        self.write_limited && self.tenants[tenant as usize].write_limit.throttled()
    }

    // ------------------------------------------------------------ swap limits

    /// Holds `tenant` to `slots` slots (`u64::MAX`: no limit).
    pub(crate) fn set_swap_limit(&mut self, tenant: u32, slots: u64) {
        self.tenants[tenant as usize].swap_limit_slots = slots;
        self.swap_limited = self.tenants.iter().any(Tenant::has_swap_limit);
        self.debug_check();
    }

    /// Whether `tenant` holds as many slots as its swap limit lets it.
    pub(crate) fn swap_full(&self, tenant: u32, engine: &Engine) -> bool {
        let limit = self.tenants[tenant as usize].swap_limit_slots;
        limit != u64::MAX && of_tenant(engine.tenant_slots(), tenant) >= limit
    }

    /// Pages of tenants at their swap limits: no eviction may take them, so they are not
    /// counted against the pager's budget (each such tenant is still held to its own),
    /// or the tenants beside would wait for room that cannot come (the pager DST found
    /// faults waiting out `ROOM_WAIT_MAX_NS` one by one so).
    pub(crate) fn swap_limited_pages(&self, engine: &Engine) -> u64 {
        if !self.swap_limited {
            return 0;
        }
        (0..self.len())
            .filter(|&tenant| self.swap_full(tenant, engine))
            .map(|tenant| self.tenants[tenant as usize].resident_pages)
            .sum()
    }

    /// `tenant`'s swap limit, if its reaching it is still to be said (it is, from now).
    pub(crate) fn swap_full_unsaid(&mut self, tenant: u32) -> Option<u64> {
        let tenant = &mut self.tenants[tenant as usize];
        if tenant.swap_limit_said {
            return None;
        }
        tenant.swap_limit_said = true;
        Some(tenant.swap_limit_slots)
    }

    // ------------------------------------------------------------- the rest

    /// `tenant`'s pages swapped out (`outs`) or read back from the device (`ins`).
    pub(crate) fn count_traffic(&mut self, tenant: u32, outs: u64, ins: u64) {
        let tenant = &mut self.tenants[tenant as usize];
        tenant.swap_outs += outs;
        tenant.swap_ins += ins;
    }

    /// Pages read back for every tenant's faults.
    pub(crate) fn swap_ins(&self) -> u64 {
        self.tenants.iter().map(|tenant| tenant.swap_ins).sum()
    }

    /// Whether `page` of `tenant`'s, just read back, keeps its slot (`clean_total`: the
    /// engine's clean evictions of the tenant's cached pages so far).
    pub(crate) fn swap_cache_keeps(&mut self, tenant: u32, page: u64, clean_total: u64) -> bool {
        self.tenants[tenant as usize].swap_cache.keep(page, clean_total)
    }

    /// A cached page of `tenant`'s was written: its slot went stale.
    pub(crate) fn swap_cache_dirtied(&mut self, tenant: u32) {
        self.tenants[tenant as usize].swap_cache.dirtied();
    }

    /// A new tenant takes `tenant`'s index (if it is one): its swap cache is judged from
    /// `clean_total` (the engine's clean evictions of the index so far) on, and its swap
    /// limit's notice is said anew.
    pub(crate) fn begin(&mut self, tenant: u32, clean_total: u64) {
        if let Some(tenant) = self.tenants.get_mut(tenant as usize) {
            tenant.swap_limit_said = false;
            tenant.swap_cache = SwapCacheFeedback::counting_from(clean_total);
        }
    }

    /// What `tenant` holds and has done, by `now`.
    pub(crate) fn figures(&self, tenant: u32, engine: &Engine, now: u64) -> TenantFigures {
        let index = tenant;
        let tenant = &self.tenants[index as usize];
        let limit = &tenant.write_limit;
        TenantFigures {
            resident_pages: tenant.resident_pages,
            kept_pages: tenant.kept_pages,
            swap_outs: tenant.swap_outs,
            swap_ins: tenant.swap_ins,
            written_bytes: of_tenant(engine.tenant_host_bytes(), index),
            gc_bytes: of_tenant(engine.tenant_gc_bytes(), index),
            write_limit: limit.rate(),
            throttled_ns: limit.throttled_ns(now),
            grace_bytes: limit.grace_bytes(),
            swap_slots: of_tenant(engine.tenant_slots(), index),
            swap_limit: Some(tenant.swap_limit_slots).filter(|&slots| slots != u64::MAX),
        }
    }
}

/// What `tenant`'s share of the device's writes is charged: the bytes its swap-outs
/// appended and the GC wrote moving its pages.
fn charged_bytes(engine: &Engine, tenant: u32) -> u64 {
    of_tenant(engine.tenant_host_bytes(), tenant) + of_tenant(engine.tenant_gc_bytes(), tenant)
}

impl PagerCore {
    /// Holds `tenant`'s pages (those of the regions charged to it) to a budget of their
    /// own within the pager's (`None`: only the pager's): a daemon serving many programs
    /// holds each to what it was granted. Over it, the evictor takes that tenant's pages
    /// first, and its faults wait for room beyond it and the slack, as all faults do
    /// beyond the pager's budget.
    pub fn set_tenant_budget(&mut self, tenant: u32, budget_pages: Option<u64>) -> Result<(), CoreError> {
        self.tenants.check_tenant(tenant)?;
        let budget_pages = match budget_pages {
            Some(pages) if pages < self.budget_pages_min() => {
                return Err(CoreError::BudgetTooSmall { budget_pages: pages, min_pages: self.budget_pages_min() })
            }
            Some(pages) => pages,
            None => u64::MAX,
        };
        let grew = self.tenants.set_budget(tenant, budget_pages);
        self.wake_evictor();
        if grew {
            self.threads.wake_room();
        }
        Ok(())
    }

    /// Limits what `tenant`'s swap-outs and the GC's moves of its pages write together
    /// to `bytes_per_s` (`None`: no limit), from `now`: `src/write_limit.rs`. Over it,
    /// the evictor passes the tenant's pages over, and its faults wait for room in its
    /// own budget (as long as it takes: the wait is the limit at work, not room that
    /// does not come).
    pub fn set_tenant_write_limit(&mut self, tenant: u32, bytes_per_s: Option<u64>, now: u64) -> Result<(), CoreError> {
        self.tenants.check_tenant(tenant)?;
        let charged = charged_bytes(&self.engine, tenant);
        self.tenants.set_write_limit(tenant, bytes_per_s.filter(|&rate| rate > 0), charged, now);
        self.wake_evictor();
        Ok(())
    }

    /// Holds `tenant`'s slots (its pages on the device, written out or kept as their
    /// swap cache) to `slots` (`None`: no limit), as `memory.swap.max` holds a cgroup's,
    /// so that no tenant fills the device others swap to. At it, the evictor passes the
    /// tenant's pages over, and its faults beyond its budget go past the budget at once
    /// (counted as budget overruns, said once: `Notice::TenantSwapFull`) rather than wait
    /// for room no swap-out may make.
    pub fn set_tenant_swap_limit(&mut self, tenant: u32, slots: Option<u64>) -> Result<(), CoreError> {
        self.tenants.check_tenant(tenant)?;
        self.tenants.set_swap_limit(tenant, slots.unwrap_or(u64::MAX));
        self.wake_evictor();
        self.threads.wake_room();
        Ok(())
    }

    /// A new tenant takes `tenant`'s index: its swap cache is judged on its own outcomes,
    /// not its predecessor's, its swap limit's notice is said anew, and under the tenant
    /// policy its pages go to zones of their own (`Engine::tenant_begins`).
    pub fn tenant_begins(&mut self, tenant: u32) {
        self.engine.tenant_begins(tenant);
        let clean_total = of_tenant(self.engine.tenant_swap_cache_hits(), tenant);
        self.tenants.begin(tenant, clean_total);
    }

    /// `tenant`'s pages counted resident, and those of them kept (not on their way out).
    pub fn tenant_pages(&self, tenant: u32) -> (u64, u64) {
        self.tenants.pages(tenant)
    }

    /// What `tenant` holds and has done (`znswap status`), by `now`.
    pub fn tenant_figures(&self, tenant: u32, now: u64) -> TenantFigures {
        self.tenants.figures(tenant, &self.engine, now)
    }

    /// The tenant region `owner` is charged to.
    pub(crate) fn tenant_of(&self, owner: u32) -> u32 {
        self.regions[owner as usize].tenant
    }

    /// `owner`'s pages swapped out (`outs`) or read back from the device (`ins`),
    /// counted to its tenant.
    pub(crate) fn count_tenant_traffic(&mut self, owner: u32, outs: u64, ins: u64) {
        self.tenants.count_traffic(self.tenant_of(owner), outs, ins);
    }

    /// Room for `owner`'s tenant to map pages (`Tenants::room`).
    pub(crate) fn tenant_room(&self, owner: u32) -> u64 {
        self.tenants.room(self.tenant_of(owner), self.config.budget_pages, self.config.slack_pages)
    }

    /// Whether `tenant` is over its own budget (`Tenants::over`).
    pub(crate) fn tenant_over(&self, tenant: u32) -> bool {
        self.tenants.over(tenant, self.config.evict_batch_pages as u64, &self.engine)
    }

    /// Whether any tenant is over its own budget.
    pub(crate) fn any_tenant_over(&self) -> bool {
        self.tenants.any_over(self.config.evict_batch_pages as u64, &self.engine)
    }

    /// Whether `owner`'s tenant is held back by its write limit (as the evictor last
    /// found it).
    pub(crate) fn write_throttled(&self, owner: u32) -> bool {
        self.tenants.write_throttled(self.tenant_of(owner))
    }
}
