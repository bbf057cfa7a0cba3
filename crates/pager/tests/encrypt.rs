//! `PagerConfig::encrypt`: what reaches the device is ciphertext, pages read back equal
//! what was written, and a page altered on the device is reported lost (SIGBUS), never
//! delivered. Each check is run without encryption too, where it must come out the
//! other way: the test can fail.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use common::fill;
use znswap_pager::{lost_pages, FaultMode, Pager, PagerConfig, PagerStats, PAGE_BYTES};
use znswap_zoned::{CreateOptions, FileDevice, Geometry, ZonedDevice};

const REGION_PAGES: u64 = 2048;
const BUDGET_PAGES: u64 = 256;
const MARKER: &[u8] = b"ZNSWAP-SECRET-MARKER";

/// A known secret in every page: the marker, then bytes derived from the page.
fn secret_page(bytes: &mut [u8], page: u64) {
    fill(bytes, page, 1);
    bytes[..MARKER.len()].copy_from_slice(MARKER);
}

fn is_secret_page(bytes: &[u8], page: u64) -> bool {
    let mut expected = vec![0u8; PAGE_BYTES];
    secret_page(&mut expected, page);
    bytes == expected.as_slice()
}

/// 32 zones of 1 MiB, 16 B of per-LBA metadata (the default device's format).
fn geometry() -> Geometry {
    Geometry::from_bytes(4096, 16, 32, 1 << 20, 1 << 20, 8, 8, 4096).unwrap()
}

struct Run {
    stats: PagerStats,
    /// Pages read back as written, and pages found lost (SIGBUS).
    verified: u64,
    lost: u64,
    /// Pages read back with other bytes than written.
    wrong: u64,
    /// Times the marker occurs in the device file after the pages were written out.
    markers_on_device: usize,
}

/// Writes a secret into every page of a region 8x the budget (most go to the device),
/// optionally flips a byte of every written slot on the device, then reads every page.
fn run(path: &Path, mode: FaultMode, encrypt: bool, alter_device: bool) -> Run {
    lost_pages::install().expect("installing the lost-page handler");
    let device: Arc<dyn ZonedDevice> =
        Arc::new(FileDevice::create(path, geometry(), CreateOptions::default()).unwrap());
    let config = {
        let mut config = PagerConfig::new(BUDGET_PAGES * PAGE_BYTES as u64);
        config.fault_mode = mode;
        config.core.encrypt = encrypt;
        config
    };
    let pager = Pager::new(device.clone(), config).unwrap();
    let region = pager.alloc(REGION_PAGES * PAGE_BYTES as u64, 0).unwrap();
    let base = region.as_ptr() as usize;
    let watch = lost_pages::watch(base, REGION_PAGES).expect("watching the region");
    // SAFETY: the region is ours, REGION_PAGES pages long, touched by this thread only.
    let bytes = |page: u64| unsafe {
        std::slice::from_raw_parts_mut((base + page as usize * PAGE_BYTES) as *mut u8, PAGE_BYTES)
    };
    for page in 0..REGION_PAGES {
        secret_page(bytes(page), page);
    }
    device.sync().unwrap();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let data_offset = u64::from_le_bytes(read_at(&file, 80, 8).try_into().unwrap());
    let image = read_at(&file, 0, file.metadata().unwrap().len() as usize);
    let markers_on_device = image.windows(MARKER.len()).filter(|window| *window == MARKER).count();
    if alter_device {
        // One byte of every written page of the data area: every swapped page's only
        // copy is altered (pages never written there read back as zeroes, untouched).
        let mut offset = data_offset;
        while offset + PAGE_BYTES as u64 <= image.len() as u64 {
            let at = offset as usize + 100;
            if image[offset as usize..offset as usize + PAGE_BYTES].iter().any(|&byte| byte != 0) {
                file.write_all_at(&[image[at] ^ 0x40], at as u64).unwrap();
            }
            offset += PAGE_BYTES as u64;
        }
        file.sync_all().unwrap();
    }
    let (mut verified, mut lost, mut wrong) = (0, 0, 0);
    for page in 0..REGION_PAGES {
        let same = is_secret_page(bytes(page), page);
        if watch.is_lost(page) {
            lost += 1;
        } else if same {
            verified += 1;
        } else {
            wrong += 1;
        }
    }
    let stats = pager.stats();
    drop(watch);
    drop(region);
    drop(pager);
    Run { stats, verified, lost, wrong, markers_on_device }
}

fn read_at(file: &std::fs::File, offset: u64, len: usize) -> Vec<u8> {
    let mut buffer = vec![0u8; len];
    file.read_exact_at(&mut buffer, offset).unwrap();
    buffer
}

#[test]
fn encrypted_pages_hide_their_secrets_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    for mode in [FaultMode::HandlerThreads(2), FaultMode::SelfPaging] {
        let sealed = run(&dir.path().join(format!("sealed-{mode:?}.zns")), mode, true, false);
        assert!(sealed.stats.core.swap_outs_written > REGION_PAGES / 2, "{mode:?}: too little was swapped out");
        assert_eq!(
            sealed.stats.pages_sealed, sealed.stats.core.swap_outs_written,
            "{mode:?}: every page written was sealed"
        );
        assert_eq!(sealed.markers_on_device, 0, "{mode:?}: a secret reached the device in plaintext");
        assert_eq!((sealed.verified, sealed.lost, sealed.wrong), (REGION_PAGES, 0, 0), "{mode:?}");
        assert_eq!(sealed.stats.pages_failed_open, 0);

        let plain = run(&dir.path().join(format!("plain-{mode:?}.zns")), mode, false, false);
        assert!(plain.markers_on_device as u64 > REGION_PAGES / 2, "{mode:?}: the secrets are not visible unencrypted");
        assert_eq!((plain.verified, plain.lost, plain.wrong), (REGION_PAGES, 0, 0), "{mode:?}");
        assert_eq!(plain.stats.pages_sealed, 0);
    }
}

#[test]
fn pages_altered_on_the_device_are_lost_when_encrypted_and_wrong_when_not() {
    let dir = tempfile::tempdir().unwrap();
    for mode in [FaultMode::HandlerThreads(2), FaultMode::SelfPaging] {
        let sealed = run(&dir.path().join(format!("sealed-{mode:?}.zns")), mode, true, true);
        assert_eq!(sealed.wrong, 0, "{mode:?}: an altered page was delivered");
        assert!(sealed.lost > REGION_PAGES / 2, "{mode:?}: only {} pages lost", sealed.lost);
        assert_eq!(sealed.lost + sealed.verified, REGION_PAGES);
        assert!(sealed.stats.pages_failed_open >= sealed.lost, "{mode:?}: {:?}", sealed.stats.pages_failed_open);
        assert_eq!(sealed.stats.core.lost_pages, sealed.lost);

        let plain = run(&dir.path().join(format!("plain-{mode:?}.zns")), mode, false, true);
        assert!(
            plain.wrong > REGION_PAGES / 2,
            "{mode:?}: altering the device changed nothing ({} wrong)",
            plain.wrong
        );
        assert_eq!(plain.lost, 0);
    }
}
