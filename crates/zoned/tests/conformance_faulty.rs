//! The conformance suite through the fault-injecting wrapper with no faults asked for:
//! the wrapper is transparent, and its own injector (zones failed, commands failed on
//! demand) behaves as the emulated devices' does.

mod common;

use std::sync::Arc;

use znswap_zoned::conformance::Harness;
use znswap_zoned::{FaultSpec, FaultyDevice, Geometry, MemDevice, ZonedDevice};

struct FaultyHarness {
    geometry: Geometry,
}

impl Harness for FaultyHarness {
    fn fresh(&mut self) -> Box<dyn ZonedDevice> {
        let inner: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(self.geometry).unwrap());
        Box::new(FaultyDevice::new(inner, FaultSpec::default()))
    }
    fn reopen(&mut self, _device: Box<dyn ZonedDevice>) -> Option<Box<dyn ZonedDevice>> {
        None
    }
    fn unwritten_reads_zero(&self) -> bool {
        true
    }
}

// The fault wrapper over memory keeps nothing across close.
conformance_matrix!(|geometry| FaultyHarness { geometry }; not_applicable: [persistence]);
