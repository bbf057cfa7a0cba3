//! The conformance suite on the file-backed device (the embedded default), including
//! persistence across close and reopen.

mod common;

use std::path::PathBuf;

use znswap_zoned::conformance::Harness;
use znswap_zoned::{CreateOptions, FileDevice, Geometry, ZonedDevice};

struct FileHarness {
    geometry: Geometry,
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl FileHarness {
    fn new(geometry: Geometry) -> FileHarness {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("device.zns");
        FileHarness { geometry, _dir: dir, path }
    }
}

impl Harness for FileHarness {
    fn fresh(&mut self) -> Box<dyn ZonedDevice> {
        Box::new(FileDevice::create(&self.path, self.geometry, CreateOptions { force: true }).unwrap())
    }
    fn reopen(&mut self, device: Box<dyn ZonedDevice>) -> Option<Box<dyn ZonedDevice>> {
        drop(device);
        Some(Box::new(FileDevice::open_expecting(&self.path, &self.geometry).unwrap()))
    }
    fn unwritten_reads_zero(&self) -> bool {
        true
    }
}

conformance_matrix!(FileHarness::new);
