//! The conformance suite on the in-memory device, directly and through the append merger.

mod common;

use znswap_zoned::conformance::Harness;
use znswap_zoned::{AppendMerger, Geometry, MemDevice, ZonedDevice};

struct MemHarness {
    geometry: Geometry,
}

impl Harness for MemHarness {
    fn fresh(&mut self) -> Box<dyn ZonedDevice> {
        Box::new(MemDevice::new(self.geometry).unwrap())
    }
    fn reopen(&mut self, _device: Box<dyn ZonedDevice>) -> Option<Box<dyn ZonedDevice>> {
        None
    }
    fn unwritten_reads_zero(&self) -> bool {
        true
    }
}

mod direct {
    use super::*;
    // Memory keeps nothing across close.
    conformance_matrix!(|geometry| MemHarness { geometry }; not_applicable: [persistence]);
}

struct MergedHarness {
    geometry: Geometry,
}

impl Harness for MergedHarness {
    fn fresh(&mut self) -> Box<dyn ZonedDevice> {
        Box::new(AppendMerger::new(MemDevice::new(self.geometry).unwrap(), 2))
    }
    fn reopen(&mut self, _device: Box<dyn ZonedDevice>) -> Option<Box<dyn ZonedDevice>> {
        None
    }
    fn unwritten_reads_zero(&self) -> bool {
        true
    }
}

mod merged {
    use super::*;
    conformance_matrix!(|geometry| MergedHarness { geometry }; not_applicable: [persistence]);
}
