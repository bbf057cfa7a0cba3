//! The conformance suite on the in-memory device, directly, through the append merger
//! and through a compressed pool.

mod common;

use znswap_zoned::conformance::Harness;
use znswap_zoned::{AppendMerger, CompressedPool, Geometry, MemDevice, ZonedDevice, COMPRESSED_POOL_MIN_BYTES};

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

/// Through a compressed pool (the smallest, so that its ring wraps and drops entries
/// within a check): every read it serves must equal what the device holds.
struct PooledHarness {
    geometry: Geometry,
}

impl Harness for PooledHarness {
    fn fresh(&mut self) -> Box<dyn ZonedDevice> {
        let device = std::sync::Arc::new(MemDevice::new(self.geometry).unwrap());
        Box::new(CompressedPool::new(device, COMPRESSED_POOL_MIN_BYTES))
    }
    fn reopen(&mut self, _device: Box<dyn ZonedDevice>) -> Option<Box<dyn ZonedDevice>> {
        None
    }
    fn unwritten_reads_zero(&self) -> bool {
        true
    }
}

mod pooled {
    use super::*;
    conformance_matrix!(|geometry| PooledHarness { geometry }; not_applicable: [persistence]);
}
