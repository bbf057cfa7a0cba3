//! The agents of served processes that answer some of the pager's discards late
//! (`PagerFaults::late_discards`, `DropDelay::Late`: the process stopped, held by a fork,
//! slow): such an agent zaps the pages some steps later, outside any pager lock, and
//! answers later still, while the pager goes on. One late answer per region at most.

use znswap_pager_core::AddressRange;

use crate::scenario::{below, chance, Rng};

/// Steps within which a late agent zaps, and then answers.
const LATE_ZAP_STEPS: u64 = 3_000;
const LATE_ANSWER_STEPS: u64 = 1_000;

/// A served process's agent late to answer a discard: it zaps `ranges` at step `zap_at`
/// and answers at `answer_at` (after).
struct LateAgent {
    owner: u32,
    ranges: Vec<AddressRange>,
    zap_at: u64,
    answer_at: u64,
    zapped: bool,
}

pub struct LateAgents {
    late: Vec<LateAgent>,
    /// Draws which discards an agent answers late, and when: a stream of its own.
    rng: Rng,
    /// `PagerFaults::late_discards`: the chance an agent answers a discard late.
    late_discards: f64,
}

impl LateAgents {
    pub fn new(rng: Rng, late_discards: f64) -> LateAgents {
        LateAgents { late: Vec::new(), rng, late_discards }
    }

    /// Whether any agent may answer late in this run.
    pub fn enabled(&self) -> bool {
        self.late_discards != 0.0
    }

    /// Whether `owner`'s agent owes an answer.
    pub fn owes(&self, owner: u32) -> bool {
        self.late.iter().any(|late| late.owner == owner)
    }

    /// Whether the next discard `owner`'s agent is asked is answered late; if so, the
    /// agent takes `ranges` and zaps them some steps after `step`.
    pub fn take_late(&mut self, owner: u32, ranges: &[AddressRange], step: u64) -> bool {
        if !chance(&mut self.rng, self.late_discards) {
            return false;
        }
        let zap_at = step + 1 + below(&mut self.rng, LATE_ZAP_STEPS);
        let answer_at = zap_at + below(&mut self.rng, LATE_ANSWER_STEPS);
        self.late.push(LateAgent { owner, ranges: ranges.to_vec(), zap_at, answer_at, zapped: false });
        true
    }

    pub fn any(&self) -> bool {
        !self.late.is_empty()
    }

    /// The ranges of the agents whose time to zap has come, in order (each zaps once).
    pub fn due_zaps(&mut self, step: u64) -> Vec<Vec<AddressRange>> {
        let mut due = Vec::new();
        for late in &mut self.late {
            if !late.zapped && step >= late.zap_at {
                late.zapped = true;
                due.push(std::mem::take(&mut late.ranges));
            }
        }
        due
    }

    /// The pager asks for `owner`'s late answer: `None` if none is owed, else whether it
    /// has come (zapped, and its time come), which settles it.
    pub fn answer(&mut self, owner: u32, step: u64) -> Option<bool> {
        let index = self.late.iter().position(|late| late.owner == owner)?;
        let late = &self.late[index];
        if !late.zapped || step < late.answer_at {
            return Some(false);
        }
        self.late.swap_remove(index);
        Some(true)
    }

    /// `owner`'s process is gone: its late answer never comes.
    pub fn forget(&mut self, owner: u32) {
        self.late.retain(|late| late.owner != owner);
    }
}
