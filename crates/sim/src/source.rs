//! What application threads do: streams of page accesses, grouped into requests.

use znswap_workload::{Generator, Workload};

/// One access of a thread, to a page of its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub page: u64,
    pub write: bool,
    /// Last access of a request: the request's latency ends here (key-value stores).
    pub request_end: bool,
}

/// An access stream; `None` ends the thread.
pub trait Source: Send {
    fn next_step(&mut self) -> Option<Step>;
}

/// A `znswap-workload` generator (one access per request), optionally bounded, and
/// optionally after writing its whole range once in order (the benchmark's
/// pre-allocation: the working set exists before the measured accesses start).
pub struct GeneratorSource {
    generator: Generator,
    remaining: u64,
    fill_next: u64,
    fill_end: u64,
}

impl GeneratorSource {
    pub fn new(workload: Workload, pages: u64, seed: u64, accesses_max: Option<u64>) -> GeneratorSource {
        GeneratorSource {
            generator: Generator::new(workload, pages, seed),
            remaining: accesses_max.unwrap_or(u64::MAX),
            fill_next: 0,
            fill_end: 0,
        }
    }

    pub fn fill_first(mut self, pages: u64) -> GeneratorSource {
        self.fill_end = pages;
        self
    }
}

impl Source for GeneratorSource {
    fn next_step(&mut self) -> Option<Step> {
        if self.fill_next < self.fill_end {
            self.fill_next += 1;
            return Some(Step { page: self.fill_next - 1, write: true, request_end: true });
        }
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let access = self.generator.next()?;
        Some(Step { page: access.page, write: access.write, request_end: true })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_generator_ends() {
        let mut source = GeneratorSource::new(Workload::AnonWSeq, 4, 1, Some(6));
        let pages: Vec<u64> = std::iter::from_fn(|| source.next_step().map(|step| step.page)).collect();
        assert_eq!(pages, [0, 1, 2, 3, 0, 1]);
    }

    #[test]
    fn a_filled_generator_writes_its_range_first() {
        let mut source = GeneratorSource::new(Workload::AnonWRand, 3, 1, Some(2)).fill_first(3);
        let steps: Vec<Step> = std::iter::from_fn(|| source.next_step()).collect();
        assert_eq!(steps.len(), 5);
        assert!(steps.iter().all(|step| step.write && step.request_end));
        assert_eq!(steps[..3].iter().map(|step| step.page).collect::<Vec<_>>(), [0, 1, 2]);
    }
}
