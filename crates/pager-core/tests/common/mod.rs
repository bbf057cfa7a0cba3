//! What the core's tests share: a small device and a small core over it.
// (Each test file uses what it needs.)
#![allow(dead_code)]

use znswap_core::{Geometry, PolicyKind};
use znswap_pager_core::CoreConfig;

/// 16 zones of 32 slots with per-LBA metadata and `max_open_zones` open at once.
pub fn geometry(max_open_zones: u32) -> Geometry {
    Geometry {
        zone_count: 16,
        zone_capacity_pages: 32,
        metadata_bytes: 16,
        write_granularity_pages: 1,
        max_open_zones,
        max_active_zones: max_open_zones,
        zone_append_pages_max: 8,
    }
}

/// A 32-page budget with no slack, evicting 4 pages at a time, one tenant, no read-ahead,
/// parking or reference sampling.
pub fn core_config(policy: PolicyKind) -> CoreConfig {
    CoreConfig {
        slack_pages: 0,
        evict_batch_pages: 4,
        reference_sampling: false,
        readahead_pages: 0,
        regions_max: 4,
        policy,
        ..CoreConfig::new(32)
    }
}
