//! The placement and reclaim policy API (the paper's Table 1) and its three sample
//! policies.
//!
//! A policy gets the page being swapped out (`pg_inf`) and returns a swap-zone; it can
//! read zones (`zn_inf`), owners (`vm_inf`) and the engine's totals (`swap_inf`), and ask
//! the GC to reclaim zones (`rec_zn`) when empty zones run low.

use serde::Serialize;

use crate::config::VictimSelection;

/// A swap-zone: a virtual zone a policy allocates into (0 .. `swap_inf().swap_zones`).
pub type SwapZoneId = u32;

/// `pg_inf`: what is known about the page being swapped out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PageInfo {
    pub owner: u32,
    pub page: u64,
    /// The owner's tenant (the paper's cgroup id).
    pub tenant: u16,
    /// 16-sample shift register: bit i set = accessed (swapped in or dirtied) i epochs
    /// ago. One epoch is 1/16 of the policy's `history_span`.
    pub access_history: u16,
    /// The core (or thread) swapping the page out.
    pub core: u32,
}

/// `zn_inf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneInfo {
    pub zone_id: u32,
    pub capacity: u32,
    pub valid_slots: u32,
    pub invalid_slots: u32,
    pub swap_cache_slots: u32,
    pub written_slots: u32,
    /// The swap-zone this zone currently backs, if any.
    pub swap_zone_id: Option<SwapZoneId>,
    pub tenant: u16,
    /// Full and not already being collected: a valid `rec_zn` target.
    pub reclaimable: bool,
}

/// `vm_inf`: the owner region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct VmInfo {
    pub owner: u32,
    pub pages: u64,
    pub tenant: u16,
}

/// `swap_inf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SwapInfo {
    pub num_slots: u64,
    pub num_zones: u32,
    pub free_slots: u64,
    /// Valid plus swap-cached slots: what a full rewrite of the swapped pages would move.
    pub live_slots: u64,
    pub free_zones: u32,
    pub high_wmark: u32,
    pub low_wmark: u32,
    pub gc_running: bool,
    pub swap_zones: u32,
    /// GC destination streams (`Policy::gc_stream` picks among them).
    pub gc_streams: u32,
}

/// How many swap-outs the 16 samples of `PageInfo::access_history` span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum HistorySpan {
    /// This many device writes: an epoch is 1/16 of the device's slots written, that
    /// many times (the paper's span: one).
    DeviceWrites(u32),
    /// This many tenths of a rewrite of the live slots (valid and swap-cached, counted
    /// when each epoch starts). What tells a warm page from a cold one is how often it
    /// returns while the rest of the live pages are rewritten: a span fixed in device
    /// writes covers twice the rewrites at 50 % utilization that it covers at 100 %.
    LiveWrites { tenths: u32 },
}

impl HistorySpan {
    /// The shortest span of `LiveWrites`, as a fraction of one device write (1/64):
    /// with almost nothing live (at start) the clock would tick on every swap-out.
    pub const LIVE_SPAN_MIN_DEVICE_FRACTION: u64 = 64;

    /// Swap-outs in the epoch that starts now.
    pub fn epoch_pages(self, total_slots: u64, live_slots: u64) -> u64 {
        match self {
            HistorySpan::DeviceWrites(writes) => (total_slots * u64::from(writes.clamp(1, 64)) / 16).max(1),
            HistorySpan::LiveWrites { tenths } => {
                let floor = total_slots / (16 * Self::LIVE_SPAN_MIN_DEVICE_FRACTION);
                (live_slots * u64::from(tenths.clamp(1, 640)) / 160).max(floor).max(1)
            }
        }
    }
}

/// What a policy may read.
pub trait PolicyView {
    fn zn_inf(&self, zone: u32) -> ZoneInfo;
    fn vm_inf(&self, owner: u32) -> Option<VmInfo>;
    fn swap_inf(&self) -> SwapInfo;
    /// Valid plus swap-cached slots charged to a tenant.
    fn tenant_slots(&self, tenant: u16) -> u64;
}

pub trait Policy: Send {
    fn name(&self) -> &'static str;

    /// Picks the swap-zone for a page being swapped out; must be below
    /// `view.swap_inf().swap_zones` (the engine clamps it otherwise).
    fn swap_zone(&mut self, page: &PageInfo, view: &dyn PolicyView) -> SwapZoneId;

    /// The GC stream (0 .. `swap_inf().gc_streams`) a page the GC moves goes to: the
    /// write stage's destination choice (§5.2).
    fn gc_stream(&mut self, _page: &PageInfo, _view: &dyn PolicyView) -> u32 {
        0
    }

    /// The ZNGC victim choice the policy was designed with, if it depends on one: it
    /// replaces `Config::victim_selection` for the engine the policy runs in.
    fn victim_selection(&self) -> Option<VictimSelection> {
        None
    }

    /// The swap-zones the policy sends pages to now, as (user swap-zones, GC streams)
    /// counted from the first: a policy that folds its zones says so, and the engine
    /// finishes the open zones of the rest before the GC next picks a victim, instead of
    /// waiting for them to go idle (`Config::idle_zone_finish_pages`). `None`: all.
    fn swap_zones_in_use(&self) -> Option<(u32, u32)> {
        None
    }

    /// The swap-zone and GC stream a tenant's pages go to, if the policy gives each
    /// tenant its own: when a new tenant takes an index, the engine finishes their open
    /// zones (`Engine::tenant_begins`), so the newcomer's pages do not share a zone with
    /// its predecessor's, garbage once it left, whose collection would move them.
    fn tenant_swap_zones(&self, _tenant: u32, _info: &SwapInfo) -> Option<(SwapZoneId, u32)> {
        None
    }

    /// What the 16 samples of `PageInfo::access_history` span (the paper's: one device
    /// write, an epoch being 1/16 of the device written). The engine reads it once, at
    /// start.
    fn history_span(&self) -> HistorySpan {
        HistorySpan::DeviceWrites(1)
    }

    /// Called when empty zones fall under the low watermark. Pushing a zone into
    /// `reclaim` is `rec_zn(zone)`: the GC takes requested zones before its own choice.
    fn low_watermark(&mut self, _view: &dyn PolicyView, _reclaim: &mut Vec<u32>) {}
}

/// Per-core: one swap-zone per core, multiplexed when there are more cores.
#[derive(Debug, Default)]
pub struct PerCorePolicy;

impl Policy for PerCorePolicy {
    fn name(&self) -> &'static str {
        "per-core"
    }

    fn swap_zone(&mut self, page: &PageInfo, view: &dyn PolicyView) -> SwapZoneId {
        page.core % view.swap_inf().swap_zones
    }
}

/// Hot/cold: pages accessed in at least `hot_samples_min` of their last 16 samples go to
/// the hot half of the swap-zones, the others to the cold half, so pages that die young
/// do not share zones with pages that live long (less GC copying).
#[derive(Debug)]
pub struct HotColdPolicy {
    pub hot_samples_min: u32,
}

impl Default for HotColdPolicy {
    fn default() -> HotColdPolicy {
        HotColdPolicy { hot_samples_min: 2 }
    }
}

impl HotColdPolicy {
    pub fn is_hot(&self, access_history: u16) -> bool {
        access_history.count_ones() >= self.hot_samples_min
    }
}

impl Policy for HotColdPolicy {
    fn name(&self) -> &'static str {
        "hot-cold"
    }

    fn gc_stream(&mut self, page: &PageInfo, view: &dyn PolicyView) -> u32 {
        // Cold survivors to the second stream when there is one: survivors that die soon
        // do not share zones with those that live on.
        u32::from(view.swap_inf().gc_streams > 1 && !self.is_hot(page.access_history))
    }

    fn swap_zone(&mut self, page: &PageInfo, view: &dyn PolicyView) -> SwapZoneId {
        // The first half of the swap-zones take hot pages, the rest cold ones; cores
        // multiplex within each half. One swap-zone takes everything.
        let zones = view.swap_inf().swap_zones;
        if zones < 2 {
            return 0;
        }
        let hot_zones = zones / 2;
        if self.is_hot(page.access_history) {
            page.core % hot_zones
        } else {
            hot_zones + page.core % (zones - hot_zones)
        }
    }
}

/// Lifetime: separates pages by their expected time to death (a slot dies when its page
/// is swapped in again), after SepBIT (Wang et al., "Separating Data via Block
/// Invalidation Time Inference for Write Amplification Reduction in Log-Structured
/// Storage", FAST '22) and the LFS cleaner (Rosenblum and Ousterhout, SOSP '91).
///
/// - **Three classes by rate of return**, counted in the 16 history samples, which for
///   this policy span 2.5 rewrites of the live slots (`history_span`): hot (returned in
///   at least `hot_returns_min` earlier samples), warm (returned at least once before),
///   cold (never seen back in that window). For swap-outs the sample of the access that
///   brought the page in is not counted: every swapped-in page has it.
/// - **The span is counted in rewrites of the live slots**, not in device writes: what
///   tells a warm page from a cold one is how often it returns while the other live pages
///   are rewritten, and a fixed count of device writes covers twice the rewrites at 50 %
///   utilization that it covers at 100 %. 2.5 rewrites are two device writes at 80 %,
///   the best of one, two and four there (the placement probe's pmbench at 80 / 90 %:
///   WAF 1.942 / 4.069 with one device write, 1.901 / 3.938 with two, 1.900 / 3.952 with
///   four), and 1.25 at 50 %, where two held too many returns to tell YCSB-A's warm pages
///   from its hot ones (1.207 with two device writes, 1.176 with 2.5 rewrites;
///   crates/dst/RESULTS.md).
/// - **GC survivors** go to the GC stream of their class, by the same count: a page that
///   outlived its zone is older than the zone's new data (SepBIT's separation of GC
///   writes), and one that has not come back within the span joins the coldest (with
///   two streams instead of three: 1.936 / 3.999; one: 2.008 / 4.328).
/// - **Victims** by cost-benefit, `(1 - u) * age / (1 + u)`, age counted in swap-outs
///   since the zone's last append: once pages are separated, cold zones free their slots
///   slowly; greedy keeps them until they are almost empty and starves the hot zones of
///   room, where the age term collects a stable cold zone earlier (LFS §3.5).
/// - **One zone per class, whatever the core**, and **only when the headroom pays for
///   them.** Every stream is an open zone, half unwritten on average: the two extra user
///   zones and two extra GC streams cost about two zones the GC cannot collect
///   (`separation_cost_slots`). Separating cuts the WAF by about a quarter where the
///   headroom H is wide (the probe's 256 zones); on 64 zones at 80 % (H about 8 zones) it
///   loses 6.6 % on pmbench, and even the oracle gains nothing; at 70 % (H about 14) it
///   gains 8.5 % (crates/dst/RESULTS.md, "The zone count"). So the policy separates only
///   from 12 zones of headroom (`HEADROOM_PER_COST_TENTHS`). Below that, every class shares
///   swap-zone 0 and GC stream 0 (per-core's layout with cost-benefit victims), and it
///   tells the engine (`swap_zones_in_use`), which finishes the other zones.
#[derive(Debug)]
pub struct LifetimePolicy {
    /// Earlier returns (of the 16 samples) from which a page is hot.
    pub hot_returns_min: u32,
    /// What the 16 samples span.
    pub history_span: HistorySpan,
    /// Whether the classes get zones of their own now (`fits_streams`).
    separating: bool,
}

impl Default for LifetimePolicy {
    fn default() -> LifetimePolicy {
        LifetimePolicy { hot_returns_min: 3, history_span: HistorySpan::LiveWrites { tenths: 25 }, separating: true }
    }
}

impl LifetimePolicy {
    pub const CLASSES: u32 = 3;
    /// Headroom (in slots the GC can win back) per slot that separating costs, in tenths,
    /// from which the classes get zones of their own; they share one again below
    /// `HEADROOM_PER_COST_LEAVE_TENTHS`, so a headroom near the line does not flip the
    /// layout on every swap-out.
    /// (Fitted in the placement probe: with three classes separating costs two zones, a
    /// headroom of 7.8 zones lost 2-7 % and 14.2 gained 8-15 %; the line is at 12.)
    pub const HEADROOM_PER_COST_TENTHS: u64 = 60;
    pub const HEADROOM_PER_COST_LEAVE_TENTHS: u64 = 53;

    fn zone_slots(info: &SwapInfo) -> u64 {
        info.num_slots / u64::from(info.num_zones.max(1))
    }

    /// Slots the separated layout keeps from the GC beyond the shared one: each extra open
    /// zone is half unwritten on average. (The GC's reserve does not grow with its streams:
    /// `Config::gc_streams`.)
    pub fn separation_cost_slots(info: &SwapInfo) -> u64 {
        let extra_open = u64::from(Self::CLASSES.min(info.swap_zones) - 1) + u64::from(info.gc_streams - 1);
        Self::zone_slots(info) * extra_open / 2
    }

    /// Slots the GC can win back: those not live, less the empty zones its watermarks keep
    /// (on average halfway between them).
    pub fn headroom_slots(info: &SwapInfo) -> u64 {
        let zone_slots = Self::zone_slots(info);
        let kept_empty = zone_slots * u64::from(info.low_wmark + info.high_wmark) / 2;
        info.num_slots.saturating_sub(info.live_slots).saturating_sub(kept_empty)
    }

    /// Decides, from the headroom now, whether the classes get zones of their own.
    pub fn fits_streams(&mut self, info: &SwapInfo) -> bool {
        let cost = Self::separation_cost_slots(info);
        let headroom = Self::headroom_slots(info);
        let tenths =
            if self.separating { Self::HEADROOM_PER_COST_LEAVE_TENTHS } else { Self::HEADROOM_PER_COST_TENTHS };
        self.separating = headroom * 10 >= tenths * cost;
        self.separating
    }

    /// 0 hot, 1 warm, 2 cold, from the returns the history holds.
    pub fn class(&self, returns: u32) -> u32 {
        if returns >= self.hot_returns_min {
            0
        } else if returns >= 1 {
            1
        } else {
            2
        }
    }

    /// The class of a page being swapped out: its newest access is the one that brought it
    /// in (or dirtied it), which every swapped-in page has.
    pub fn swap_out_class(&self, access_history: u16) -> u32 {
        self.class(access_history.count_ones().saturating_sub(1))
    }
}

impl Policy for LifetimePolicy {
    fn name(&self) -> &'static str {
        "lifetime"
    }

    fn victim_selection(&self) -> Option<VictimSelection> {
        Some(VictimSelection::CostBenefit)
    }

    fn history_span(&self) -> HistorySpan {
        self.history_span
    }

    fn swap_zones_in_use(&self) -> Option<(u32, u32)> {
        (!self.separating).then_some((1, 1))
    }

    fn swap_zone(&mut self, page: &PageInfo, view: &dyn PolicyView) -> SwapZoneId {
        let info = view.swap_inf();
        if !self.fits_streams(&info) {
            return 0;
        }
        // One zone per class: cores share it (an append needs no lock on the zone), and
        // every zone more would be half unwritten headroom.
        self.swap_out_class(page.access_history).min(info.swap_zones - 1)
    }

    fn gc_stream(&mut self, page: &PageInfo, view: &dyn PolicyView) -> u32 {
        // The layout `swap_zone` chose last: survivors follow it, with no headroom sums per
        // page moved.
        if !self.separating {
            return 0;
        }
        // With fewer streams, neighbouring classes share one (two: hot with warm, cold alone).
        self.class(page.access_history.count_ones()) * view.swap_inf().gc_streams / Self::CLASSES
    }
}

/// Tenant (the paper's cgroup policy): a swap-zone per tenant, multiplexed, and a GC
/// stream per tenant as far as there are streams (so the GC's moves of one tenant's pages
/// do not land beside another's, whose rewrites would have them moved again, charged to
/// the first); per-tenant slot limits; under the low watermark, the tenant most over its
/// limit has its zone with the fewest valid slots reclaimed.
#[derive(Debug)]
pub struct TenantPolicy {
    /// Slot limit per tenant; `u64::MAX` for none.
    pub slot_limits: Vec<u64>,
    /// Zones requested per low-watermark call.
    pub reclaim_zones_max: u32,
}

impl TenantPolicy {
    pub fn new(tenants: u32) -> TenantPolicy {
        TenantPolicy { slot_limits: vec![u64::MAX; tenants as usize], reclaim_zones_max: 2 }
    }
}

impl Policy for TenantPolicy {
    fn name(&self) -> &'static str {
        "tenant"
    }

    fn swap_zone(&mut self, page: &PageInfo, view: &dyn PolicyView) -> SwapZoneId {
        page.tenant as u32 % view.swap_inf().swap_zones
    }

    fn gc_stream(&mut self, page: &PageInfo, view: &dyn PolicyView) -> u32 {
        page.tenant as u32 % view.swap_inf().gc_streams
    }

    fn tenant_swap_zones(&self, tenant: u32, info: &SwapInfo) -> Option<(SwapZoneId, u32)> {
        Some((tenant % info.swap_zones, tenant % info.gc_streams))
    }

    fn low_watermark(&mut self, view: &dyn PolicyView, reclaim: &mut Vec<u32>) {
        // The tenant whose slots exceed its limit the most.
        let mut worst: Option<(u16, u64)> = None;
        for (tenant, &limit) in self.slot_limits.iter().enumerate() {
            let used = view.tenant_slots(tenant as u16);
            let over = used.saturating_sub(limit);
            if over > 0 && worst.map_or(true, |(_, most)| over > most) {
                worst = Some((tenant as u16, over));
            }
        }
        let Some((tenant, _)) = worst else { return };
        // Its zones with the fewest valid slots: one linear pass keeping the best few.
        // The engine asks once per low watermark's worth of victims, which amortizes it.
        let info = view.swap_inf();
        let wanted = self.reclaim_zones_max as usize;
        let first = reclaim.len();
        for zone in 0..info.num_zones {
            let zone = view.zn_inf(zone);
            if zone.tenant != tenant || !zone.reclaimable || reclaim[..first].contains(&zone.zone_id) {
                continue;
            }
            let chosen = &mut reclaim[first..];
            if chosen.len() < wanted {
                reclaim.push(zone.zone_id);
                continue;
            }
            // Replace the chosen zone with the most valid slots if this one has fewer.
            let (worst_index, worst_valid) = chosen
                .iter()
                .enumerate()
                .map(|(index, &id)| (index, view.zn_inf(id).valid_slots))
                .max_by_key(|&(_, valid)| valid)
                .expect("non-empty");
            if zone.valid_slots < worst_valid {
                chosen[worst_index] = zone.zone_id;
            }
        }
        reclaim[first..].sort_by_key(|&id| view.zn_inf(id).valid_slots);
    }
}

/// The sample policies by name, for drivers and the simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum PolicyKind {
    PerCore,
    HotCold,
    Tenant,
    Lifetime,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 4] =
        [PolicyKind::PerCore, PolicyKind::HotCold, PolicyKind::Tenant, PolicyKind::Lifetime];
    /// `ALL`'s names, for messages.
    pub const NAMES: [&'static str; 4] = ["per-core", "hot-cold", "tenant", "lifetime"];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::PerCore => "per-core",
            PolicyKind::HotCold => "hot-cold",
            PolicyKind::Tenant => "tenant",
            PolicyKind::Lifetime => "lifetime",
        }
    }

    pub fn from_name(name: &str) -> Option<PolicyKind> {
        PolicyKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// GC destination streams the policy splits survivors into (`Config::gc_streams`).
    pub fn gc_streams(self) -> u32 {
        match self {
            PolicyKind::HotCold => 2,
            PolicyKind::Lifetime => LifetimePolicy::CLASSES,
            PolicyKind::Tenant => crate::config::GC_STREAMS_MAX,
            PolicyKind::PerCore => 1,
        }
    }

    pub fn build(self, tenants: u32) -> Box<dyn Policy> {
        match self {
            PolicyKind::PerCore => Box::new(PerCorePolicy),
            PolicyKind::HotCold => Box::new(HotColdPolicy::default()),
            PolicyKind::Tenant => Box::new(TenantPolicy::new(tenants)),
            PolicyKind::Lifetime => Box::new(LifetimePolicy::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct View {
        zones: Vec<ZoneInfo>,
        tenant_slots: Vec<u64>,
        /// `swap_inf`'s answer; `View::new` gives one with nothing live on 64 zones.
        info: SwapInfo,
    }

    impl View {
        fn new(zones: Vec<ZoneInfo>, tenant_slots: Vec<u64>) -> View {
            let info = SwapInfo {
                num_slots: 64 * 1024,
                num_zones: 64,
                free_slots: 64 * 1024,
                live_slots: 0,
                free_zones: 64,
                high_wmark: 6,
                low_wmark: 4,
                gc_running: false,
                swap_zones: 4,
                gc_streams: 1,
            };
            View { zones, tenant_slots, info }
        }
    }

    impl PolicyView for View {
        fn zn_inf(&self, zone: u32) -> ZoneInfo {
            self.zones[zone as usize]
        }
        fn vm_inf(&self, _owner: u32) -> Option<VmInfo> {
            None
        }
        fn swap_inf(&self) -> SwapInfo {
            self.info
        }
        fn tenant_slots(&self, tenant: u16) -> u64 {
            self.tenant_slots[tenant as usize]
        }
    }

    fn zone(zone_id: u32, tenant: u16, valid_slots: u32) -> ZoneInfo {
        ZoneInfo {
            zone_id,
            capacity: 10,
            valid_slots,
            invalid_slots: 10 - valid_slots,
            swap_cache_slots: 0,
            written_slots: 10,
            swap_zone_id: None,
            tenant,
            reclaimable: true,
        }
    }

    fn page(tenant: u16, access_history: u16, core: u32) -> PageInfo {
        PageInfo { owner: 0, page: 0, tenant, access_history, core }
    }

    #[test]
    fn hot_and_cold_pages_split() {
        let view = View::new(vec![], vec![]);
        let mut policy = HotColdPolicy::default();
        assert!(policy.swap_zone(&page(0, 0b1011, 0), &view) < 2);
        assert!(policy.swap_zone(&page(0, 0b1000, 0), &view) >= 2);
        assert_eq!(PerCorePolicy.swap_zone(&page(0, 0, 6), &view), 2);
    }

    #[test]
    fn lifetime_splits_three_classes_by_earlier_returns() {
        let mut view = View::new(vec![], vec![]);
        view.info.gc_streams = 3;
        let mut policy = LifetimePolicy::default();
        // A zone per class, whatever the core: hot 0, warm 1, cold 2.
        // Only the access that brought the page in: cold.
        assert_eq!(policy.swap_zone(&page(0, 0b1, 0), &view), 2);
        assert_eq!(policy.swap_zone(&page(0, 0, 1), &view), 2);
        // One or two earlier returns: warm.
        assert_eq!(policy.swap_zone(&page(0, 0b1001, 0), &view), 1);
        assert_eq!(policy.swap_zone(&page(0, 0b1011, 1), &view), 1);
        // Three: hot, on every core.
        assert_eq!(policy.swap_zone(&page(0, 0b11011, 0), &view), 0);
        assert_eq!(policy.swap_zone(&page(0, 0b11011, 5), &view), 0);
        // Survivors count every sample.
        assert_eq!(policy.class(0b1u16.count_ones()), 1);
        assert_eq!(policy.gc_stream(&page(0, 0b1111, 0), &view), 0);
        assert_eq!(policy.gc_stream(&page(0, 0b101, 0), &view), 1);
        assert_eq!(policy.gc_stream(&page(0, 0, 0), &view), 2);
        // One stream takes every class; fewer swap-zones than classes: the coldest share the last.
        view.info.gc_streams = 1;
        assert_eq!(policy.gc_stream(&page(0, 0, 0), &view), 0);
        view.info.swap_zones = 2;
        assert_eq!(policy.swap_zone(&page(0, 0b1001, 0), &view), 1);
        assert_eq!(policy.swap_zone(&page(0, 0b1, 0), &view), 1);
        assert_eq!(policy.history_span(), HistorySpan::LiveWrites { tenths: 25 });
        assert_eq!(PerCorePolicy.history_span(), HistorySpan::DeviceWrites(1));
        assert_eq!(policy.victim_selection(), Some(VictimSelection::CostBenefit));
        assert_eq!(PerCorePolicy.victim_selection(), None);
        for (kind, name) in PolicyKind::ALL.into_iter().zip(PolicyKind::NAMES) {
            assert_eq!(kind.name(), name);
            assert_eq!(PolicyKind::from_name(kind.name()), Some(kind));
            assert_eq!(kind.build(1).name(), kind.name());
        }
        assert_eq!(PolicyKind::from_name("hotcold"), None);
    }

    #[test]
    fn lifetime_separates_only_while_the_headroom_pays_for_it() {
        // 64 zones of 1024 slots, watermarks 4 / 6, three classes and three GC streams:
        // separating costs (2 + 2) / 2 = 2 zones, so it needs 12 zones of headroom, and
        // stops under 10.6.
        let mut view = View::new(vec![], vec![]);
        view.info.gc_streams = 3;
        assert_eq!(LifetimePolicy::separation_cost_slots(&view.info), 2 * 1024);
        let live = |zones_free: f64| ((64.0 - 5.0 - zones_free) * 1024.0) as u64;
        let mut policy = LifetimePolicy::default();
        let cold = page(0, 0b1, 0);
        let survivor = page(0, 0, 0);
        // 70 % used: 19.2 spare zones, 14.2 of headroom. Separate.
        view.info.live_slots = (64.0 * 1024.0 * 0.7) as u64;
        assert_eq!(LifetimePolicy::headroom_slots(&view.info), 64 * 1024 - view.info.live_slots - 5 * 1024);
        assert_eq!(policy.swap_zone(&cold, &view), 2);
        assert_eq!(policy.gc_stream(&survivor, &view), 2);
        assert_eq!(policy.swap_zones_in_use(), None);
        // 80 %: 7.8 zones of headroom. Every class shares swap-zone 0 and GC stream 0, and
        // the policy tells the engine, which finishes the others' zones.
        view.info.live_slots = (64.0 * 1024.0 * 0.8) as u64;
        assert_eq!(policy.swap_zone(&cold, &view), 0);
        assert_eq!(policy.gc_stream(&survivor, &view), 0);
        assert_eq!(policy.swap_zones_in_use(), Some((1, 1)));
        // Back at 11 zones of headroom: not yet (hysteresis); at 12, separate again.
        view.info.live_slots = live(11.0);
        assert_eq!(policy.swap_zone(&cold, &view), 0);
        view.info.live_slots = live(12.0);
        assert_eq!(policy.swap_zone(&cold, &view), 2);
        // Down to 11 again: still separating, under 10.6 it stops.
        view.info.live_slots = live(11.0);
        assert_eq!(policy.swap_zone(&cold, &view), 2);
        view.info.live_slots = live(10.4);
        assert_eq!(policy.swap_zone(&cold, &view), 0);
        // A single GC stream and swap-zone cost nothing to separate: always separated.
        view.info.gc_streams = 1;
        view.info.swap_zones = 1;
        assert_eq!(LifetimePolicy::separation_cost_slots(&view.info), 0);
    }

    #[test]
    fn history_epochs_follow_the_device_or_the_live_slots() {
        // 2^18 slots: one device write is 16 epochs of 2^14 swap-outs.
        let total = 1 << 18;
        assert_eq!(HistorySpan::DeviceWrites(1).epoch_pages(total, 0), 1 << 14);
        assert_eq!(HistorySpan::DeviceWrites(2).epoch_pages(total, total / 2), 1 << 15);
        // 2.5 rewrites of half the device live: 1.25 device writes.
        let live = HistorySpan::LiveWrites { tenths: 25 };
        assert_eq!(live.epoch_pages(total, total / 2), (1 << 14) * 5 / 4);
        assert_eq!(live.epoch_pages(total, total * 9 / 10), total * 9 / 10 * 25 / 160);
        // Nothing live yet: no shorter than 1/64 of a device write.
        assert_eq!(live.epoch_pages(total, 0), (1 << 14) / 64);
        assert_eq!(live.epoch_pages(16, 0), 1);
    }

    #[test]
    fn tenant_most_over_limit_loses_its_emptiest_zone() {
        let mut view =
            View::new(vec![zone(0, 0, 3), zone(1, 1, 9), zone(2, 1, 2), zone(3, 1, 5), zone(4, 0, 1)], vec![20, 30]);
        view.info.num_zones = 5;
        let mut policy = TenantPolicy::new(2);
        policy.slot_limits = vec![15, 10];
        policy.reclaim_zones_max = 2;
        assert_eq!(policy.swap_zone(&page(1, 0, 0), &view), 1);
        let mut reclaim = Vec::new();
        policy.low_watermark(&view, &mut reclaim);
        assert_eq!(reclaim, vec![2, 3]);
        policy.slot_limits = vec![u64::MAX, u64::MAX];
        reclaim.clear();
        policy.low_watermark(&view, &mut reclaim);
        assert!(reclaim.is_empty());
    }
}
