//! Opening an existing device by path, whatever its kind: the one place that tells a
//! zoned block device, an NVMe generic char device and a device file apart (the CLI and
//! `znswap run`'s preload library both open devices through it).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::zbd::ZonedBlockDevice;
use crate::{CheckedDevice, FileDevice, ZonedDevice};

/// Why a device could not be opened; the message names the path and the fix.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "no device at {path}; create one with `znswap device create --device {path} --zones N --zone-size SIZE --zone-capacity SIZE`"
    )]
    Missing { path: String },
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: Box<dyn std::error::Error + Send + Sync> },
}

fn open_error(path: &Path, source: impl std::error::Error + Send + Sync + 'static) -> OpenError {
    OpenError::Open { path: path.display().to_string(), source: Box::new(source) }
}

/// Opens the device at `path`: a Linux zoned block device, an NVMe ZNS namespace's
/// generic char device (io_uring passthrough), or a znswap device file.
pub fn open_path(path: &Path) -> Result<Box<dyn ZonedDevice>, OpenError> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(OpenError::Missing { path: path.display().to_string() })
        }
        Err(error) => return Err(open_error(path, error)),
    };
    let file_type = metadata.file_type();
    if file_type.is_block_device() && is_zoned_block_device(&metadata) {
        let raw = ZonedBlockDevice::open(path).map_err(|e| open_error(path, e))?;
        return Ok(Box::new(CheckedDevice::new(raw).map_err(|e| open_error(path, e))?));
    }
    #[cfg(target_os = "linux")]
    if file_type.is_char_device() {
        let raw = crate::nvme::NvmeNamespace::open(path).map_err(|e| open_error(path, e))?;
        return Ok(Box::new(CheckedDevice::new(raw).map_err(|e| open_error(path, e))?));
    }
    // A regular file, or a conventional block device holding an emulated device.
    Ok(Box::new(FileDevice::open(path).map_err(|e| open_error(path, e))?))
}

/// A block device whose queue says it is zoned (host-managed or host-aware).
fn is_zoned_block_device(metadata: &std::fs::Metadata) -> bool {
    let rdev = metadata.rdev();
    let zoned = format!("/sys/dev/block/{}:{}/queue/zoned", libc::major(rdev), libc::minor(rdev));
    std::fs::read_to_string(zoned).is_ok_and(|model| model.trim() != "none")
}
