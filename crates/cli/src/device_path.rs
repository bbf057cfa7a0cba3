//! Which device a command works on, and how it is opened.
//!
//! Without `--path`, commands use the *embedded default*: a file-backed emulated ZNS
//! device at `$ZNSWAP_DEVICE`, or `$XDG_CACHE_HOME/znswap/default.zns`, or
//! `~/.cache/znswap/default.zns`, created with [`default_geometry`] on first use.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use znswap_zoned::{FileDevice, Geometry, ZonedDevice};

/// The embedded default: 64 zones of 64 MiB with 62 MiB capacity (the capacity/size
/// split of the QEMU ZNS namespace we test against), 4 KiB LBAs with 16 B of metadata
/// (ZNSwap's reverse-map record), 14 open / 14 active zones (the ZN540's limits).
pub fn default_geometry() -> Geometry {
    Geometry::from_bytes(4096, 16, 64, 64 << 20, 62 << 20, 14, 14, 4096).expect("the default geometry is valid")
}

pub fn default_path() -> PathBuf {
    if let Some(path) = std::env::var_os("ZNSWAP_DEVICE").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("znswap").join("default.zns")
}

/// Opens the device at `path`, or the embedded default (created on first use) when
/// `path` is `None`.
pub fn open(path: Option<&Path>) -> Result<Box<dyn ZonedDevice>> {
    match path {
        Some(path) => open_existing(path),
        None => {
            let path = default_path();
            if !path.exists() {
                eprintln!(
                    "znswap: creating the default device at {} ({} zones of {} capacity)",
                    path.display(),
                    default_geometry().zone_count,
                    znswap_zoned::format_size(default_geometry().zone_capacity_bytes())
                );
            }
            let created = !path.exists();
            let device = FileDevice::open_or_create(&path, default_geometry())
                .with_context(|| format!("opening the default device {}", path.display()))?;
            if created {
                warn_if_storage_short(&path, &default_geometry());
            }
            Ok(Box::new(device))
        }
    }
}

fn open_existing(path: &Path) -> Result<Box<dyn ZonedDevice>> {
    Ok(znswap_zoned::open_path(path)?)
}

/// A device file is sparse: it takes space only as its zones fill. Say so up front when
/// its file system cannot hold a full device, rather than failing mid-run with ENOSPC.
pub fn warn_if_storage_short(path: &Path, geometry: &Geometry) {
    let Some(free) = free_bytes(path) else { return };
    let needed = geometry.zone_count as u64 * geometry.zone_capacity_bytes();
    if free < needed {
        eprintln!(
            "znswap: warning: the file system holding {} has {} free, less than the device's {} of zone capacity; \
             writes fail once it is full (free space there, or create a smaller device with --zones)",
            path.display(),
            znswap_zoned::format_size(free),
            znswap_zoned::format_size(needed)
        );
    }
}

fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let c_path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: c_path is a NUL-terminated path and stat points at writable memory of the right type.
    if unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the struct.
    let stat = unsafe { stat.assume_init() };
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}
