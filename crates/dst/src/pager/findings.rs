//! What a seed's run found: the violations (each stamped with its step), the reads of
//! anything but the version the oracle allows, and the coverage counters of what it
//! exercised. Every part of the world reports here.

use super::coverage::Coverage;

/// Violations kept at most (the first say the most: later ones tend to follow from them).
const VIOLATIONS_MAX: usize = 32;

#[derive(Default)]
pub struct Findings {
    pub coverage: Coverage,
    pub violations: Vec<String>,
    /// Reads, or installs, of anything but the last written version.
    pub corrupted: u64,
}

impl Findings {
    pub fn violation(&mut self, step: u64, message: String) {
        if self.violations.len() < VIOLATIONS_MAX {
            self.violations.push(format!("step {step}: {message}"));
        }
    }

    /// A read, or an install, of a version the oracle does not allow.
    pub fn corruption(&mut self, step: u64, message: String) {
        self.corrupted += 1;
        self.violation(step, message);
    }
}
