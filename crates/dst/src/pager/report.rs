//! One seed's report ([`PagerDstReport`]).

use serde::Serialize;

use super::coverage::Coverage;
use super::scenario::PagerScenario;

/// One seed's run; the fields the engine's DST reports, and what the pager exercised.
#[derive(Clone, Debug, Serialize)]
pub struct PagerDstReport {
    pub seed: u64,
    /// Steps run, the final sweep's included.
    pub ops: u64,
    /// Reads checked against the oracle.
    pub pages_verified: u64,
    /// Of those, reads of pages swapped in from the device and not written since.
    pub swap_ins_verified: u64,
    /// Pages found poisoned after the device lost them.
    pub lost: u64,
    /// Reads, or installs, of anything but the last written version.
    pub corrupted: u64,
    pub violations: Vec<String>,
    pub gc_runs: u64,
    pub waf: f64,
    /// Reset holds (forks): most zones held at once, and resets deferred.
    pub zones_held_max: u64,
    pub resets_deferred: u64,
    pub core: znswap_pager_core::CoreStats,
    pub coverage: Coverage,
    pub scenario: PagerScenario,
}

impl PagerDstReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.corrupted == 0
    }
}
