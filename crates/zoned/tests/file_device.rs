//! The file device's own promises: clear errors for foreign, corrupt, mismatched or busy
//! files, and every conformance check exercised (not vacuous) on some geometry.

mod common;

use std::os::unix::fs::FileExt;

use znswap_zoned::conformance::{run_all, Harness, Outcome, CHECKS};
use znswap_zoned::file::{Layout, HEADER_BYTES, ZONE_ENTRY_BYTES};
use znswap_zoned::{CreateOptions, FileDevice, FileDeviceError, Geometry, MemDevice, ZonedDevice};

fn geometry() -> Geometry {
    common::lba4k_md16()
}

#[test]
fn opening_a_foreign_file_says_what_it_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, vec![b'x'; 8192]).unwrap();
    let error = FileDevice::open(&path).err().expect("a text file is not a device");
    assert!(matches!(error, FileDeviceError::NotADevice { .. }), "{error:?}");
    assert!(error.to_string().contains("znswap device create"), "the message names the fix: {error}");
    std::fs::write(&path, b"tiny").unwrap();
    assert!(matches!(FileDevice::open(&path), Err(FileDeviceError::NotADevice { .. })));
    let missing = FileDevice::open(dir.path().join("missing.zns")).err().unwrap();
    assert!(matches!(missing, FileDeviceError::Io { op: "open", .. }), "{missing:?}");
}

#[test]
fn create_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.zns");
    std::fs::write(&path, b"precious").unwrap();
    let error = FileDevice::create(&path, geometry(), CreateOptions::default()).err().unwrap();
    assert!(matches!(error, FileDeviceError::Exists { .. }), "{error:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious", "nothing was touched");
    FileDevice::create(&path, geometry(), CreateOptions { force: true }).unwrap();
}

#[test]
fn mismatched_geometry_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.zns");
    drop(FileDevice::create(&path, geometry(), CreateOptions::default()).unwrap());
    let other = Geometry { metadata_bytes: 64, ..geometry() };
    match FileDevice::open_expecting(&path, &other) {
        Err(FileDeviceError::GeometryMismatch { field, expected, found, .. }) => {
            assert_eq!((field, expected.as_str(), found.as_str()), ("metadata-bytes", "64", "16"));
        }
        other => panic!("expected a geometry mismatch, got {:?}", other.err()),
    }
    FileDevice::open_expecting(&path, &geometry()).unwrap();
}

#[test]
fn a_device_in_use_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.zns");
    let device = FileDevice::create(&path, geometry(), CreateOptions::default()).unwrap();
    assert!(matches!(FileDevice::open(&path), Err(FileDeviceError::Locked { .. })));
    drop(device);
    FileDevice::open(&path).unwrap();
}

#[test]
fn corrupt_records_are_reported_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.zns");
    drop(FileDevice::create(&path, geometry(), CreateOptions::default()).unwrap());
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    // A write pointer past the capacity in zone 2's entry.
    let entry = HEADER_BYTES + 2 * ZONE_ENTRY_BYTES;
    file.write_all_at(&0x4u64.to_le_bytes(), entry).unwrap();
    file.write_all_at(&u64::MAX.to_le_bytes(), entry + 8).unwrap();
    let error = FileDevice::open(&path).err().unwrap();
    assert!(matches!(error, FileDeviceError::CorruptZone { zone: 2, .. }), "{error:?}");
    // An unknown condition code.
    file.write_all_at(&0x77u64.to_le_bytes(), entry).unwrap();
    file.write_all_at(&0u64.to_le_bytes(), entry + 8).unwrap();
    assert!(matches!(FileDevice::open(&path), Err(FileDeviceError::CorruptZone { zone: 2, .. })));
    // A damaged header.
    file.write_all_at(&[0xFF], 20).unwrap();
    assert!(matches!(FileDevice::open(&path), Err(FileDeviceError::CorruptHeader { .. })));
}

#[test]
fn truncated_file_is_too_small() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.zns");
    drop(FileDevice::create(&path, geometry(), CreateOptions::default()).unwrap());
    let layout = Layout::for_geometry(&geometry());
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(layout.file_bytes - 4096).unwrap();
    assert!(matches!(FileDevice::open(&path), Err(FileDeviceError::TooSmall { .. })));
}

#[test]
fn data_bypasses_the_page_cache_where_the_file_system_allows() {
    let dir = tempfile::tempdir().unwrap();
    let device = FileDevice::create(dir.path().join("d.zns"), geometry(), CreateOptions::default()).unwrap();
    // An unaligned caller buffer goes through the bounce buffer.
    let mut data = vec![0u8; 4096 + 1];
    let lba = device.append(0, &[9; 4096], None).unwrap();
    device.read(lba, &mut data[1..], None).unwrap();
    assert!(data[1..].iter().all(|&b| b == 9));
    assert!(device.describe().contains(if device.is_direct() { "O_DIRECT" } else { "buffered" }));
}

struct Mem(Geometry);
impl Harness for Mem {
    fn fresh(&mut self) -> Box<dyn ZonedDevice> {
        Box::new(MemDevice::new(self.0).unwrap())
    }
    fn reopen(&mut self, _: Box<dyn ZonedDevice>) -> Option<Box<dyn ZonedDevice>> {
        None
    }
    fn unwritten_reads_zero(&self) -> bool {
        true
    }
}

struct File(Geometry, tempfile::TempDir);
impl Harness for File {
    fn fresh(&mut self) -> Box<dyn ZonedDevice> {
        Box::new(FileDevice::create(self.1.path().join("d.zns"), self.0, CreateOptions { force: true }).unwrap())
    }
    fn reopen(&mut self, device: Box<dyn ZonedDevice>) -> Option<Box<dyn ZonedDevice>> {
        drop(device);
        Some(Box::new(FileDevice::open(self.1.path().join("d.zns")).unwrap()))
    }
    fn unwritten_reads_zero(&self) -> bool {
        true
    }
}

#[test]
fn every_check_is_exercised_on_some_geometry() {
    let geometries = [common::lba4k_md16(), common::lba512_md8(), common::granularity_192k(), common::lba4k_md64()];
    let mut exercised = vec![false; CHECKS.len()];
    for geometry in geometries {
        let harnesses: [Box<dyn Harness>; 2] =
            [Box::new(Mem(geometry)), Box::new(File(geometry, tempfile::tempdir().unwrap()))];
        for mut harness in harnesses {
            for (index, (name, result)) in run_all(&mut *harness).into_iter().enumerate() {
                match result {
                    Ok(Outcome::Passed) => exercised[index] = true,
                    Ok(Outcome::NotApplicable(_)) => {}
                    Err(message) => panic!("{name} on {geometry:?}: {message}"),
                }
            }
        }
    }
    let vacuous: Vec<&str> =
        CHECKS.iter().zip(&exercised).filter(|(_, &done)| !done).map(|(check, _)| check.name).collect();
    assert!(vacuous.is_empty(), "checks never exercised: {vacuous:?}");
}

#[test]
fn reopening_is_a_power_cycle_for_open_zones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.zns");
    let device = FileDevice::create(&path, geometry(), CreateOptions::default()).unwrap();
    device.append(0, &[1; 4096], None).unwrap();
    device.open(1).unwrap();
    drop(device);
    let device = FileDevice::open(&path).unwrap();
    assert_eq!(device.report_zone(0).unwrap().condition, znswap_zoned::ZoneCondition::Closed);
    assert_eq!(device.report_zone(1).unwrap().condition, znswap_zoned::ZoneCondition::Empty);
    assert!(device.counters_persist());
}

/// A thread that polls its reads (a pager's fault handlers) reads what was written:
/// single and multi-LBA reads, in several zones, and zeroes past the write pointer. The
/// file lives under the target directory, not a tmpfs, so reads take the O_DIRECT path
/// the polling serves.
#[test]
fn reads_that_poll_return_what_was_written() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("d.zns");
    let geometry = geometry();
    let device = FileDevice::create(&path, geometry, CreateOptions::default()).unwrap();
    assert!(device.describe().contains("O_DIRECT"), "the test needs O_DIRECT: {}", device.describe());
    let lba = geometry.lba_bytes as usize;
    let pattern = |zone: u32, index: usize| -> Vec<u8> {
        (0..lba).map(|byte| (byte as u32).wrapping_mul(31).wrapping_add(zone * 7 + index as u32) as u8).collect()
    };
    let mut written = Vec::new();
    for zone in 0..3u32 {
        for index in 0..5usize {
            let first = device.append(zone, &pattern(zone, index), None).unwrap();
            written.push((first, pattern(zone, index)));
        }
    }
    let polled_before = znswap_zoned::polled_reads_on_this_thread();
    znswap_zoned::poll_reads_on_this_thread(true);
    let mut page = znswap_zoned::AlignedBuf::zeroed(lba);
    for (at, data) in &written {
        device.read(*at, &mut page, None).unwrap();
        assert!(page[..] == data[..], "LBA {at} read back wrong");
    }
    let mut run = znswap_zoned::AlignedBuf::zeroed(3 * lba);
    device.read(written[1].0, &mut run, None).unwrap();
    for (index, (_, data)) in written[1..4].iter().enumerate() {
        assert!(run[index * lba..(index + 1) * lba] == data[..], "page {index} of a three-page read");
    }
    let past = written[4].0 + 1;
    device.read(past, &mut page, None).unwrap();
    assert!(page.iter().all(|&byte| byte == 0), "past the write pointer reads zeroes");
    // Paused, the reads wait asleep (the ring kept), and poll again once let.
    let (reads_before, waited_before) =
        (znswap_zoned::polled_reads_on_this_thread(), znswap_zoned::polled_read_wait_ns_on_this_thread());
    assert!(waited_before > 0, "the polled reads' wait counted");
    znswap_zoned::pause_polled_reads_on_this_thread(true);
    device.read(written[2].0, &mut page, None).unwrap();
    assert!(page[..] == written[2].1[..]);
    assert_eq!(znswap_zoned::polled_reads_on_this_thread(), reads_before, "paused: the read slept");
    assert_eq!(znswap_zoned::polled_read_wait_ns_on_this_thread(), waited_before, "paused: no polling counted");
    znswap_zoned::pause_polled_reads_on_this_thread(false);
    device.read(written[3].0, &mut page, None).unwrap();
    assert!(page[..] == written[3].1[..]);
    assert_eq!(znswap_zoned::polled_reads_on_this_thread(), reads_before + 1, "let again: the read polled");
    znswap_zoned::poll_reads_on_this_thread(false);
    let polled = znswap_zoned::polled_reads_on_this_thread() - polled_before;
    // (The read past the write pointer is answered without the file.)
    assert_eq!(polled, written.len() as u64 + 2, "every read of the file polled but the paused one");
    device.read(written[0].0, &mut page, None).unwrap();
    assert_eq!(znswap_zoned::polled_reads_on_this_thread() - polled_before, polled, "off again: no more polled reads");
    assert!(page[..] == written[0].1[..]);

    // A device on a tmpfs is read from memory: no polling there, even when asked.
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else { return };
    let device = FileDevice::create(&shm.path().join("d.zns"), geometry, CreateOptions::default()).unwrap();
    let first = device.append(0, &pattern(9, 9), None).unwrap();
    znswap_zoned::poll_reads_on_this_thread(true);
    let before = znswap_zoned::polled_reads_on_this_thread();
    device.read(first, &mut page, None).unwrap();
    znswap_zoned::poll_reads_on_this_thread(false);
    assert_eq!(znswap_zoned::polled_reads_on_this_thread(), before, "a tmpfs read did not poll");
    assert!(page[..] == pattern(9, 9)[..]);
}

/// The per-LBA metadata lives in the file, not in the process: after every LBA of the
/// device is written with a record, the device file's pages resident in this process
/// are the control area's at most (mapped, the records a swap-out writes stayed resident
/// in the program under `znswap run`, 4 MiB per GiB of device), and the records read
/// back, also after a reopen.
#[test]
fn metadata_stays_in_the_file_not_in_the_process() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("d.zns");
    let geometry = geometry();
    let device = FileDevice::create(&path, geometry, CreateOptions::default()).unwrap();
    let record = |lba: u64| -> Vec<u8> { (0..16u64).map(|byte| (lba * 13 + byte) as u8).collect() };
    let mut lbas = Vec::new();
    for zone in 0..geometry.zone_count {
        for _ in 0..geometry.zone_capacity_lbas {
            let expected_lba = geometry.zone_start_lba(zone) + lbas.len() as u64 % geometry.zone_capacity_lbas;
            let lba = device.append(zone, &[7; 4096], Some(&record(expected_lba))).unwrap();
            assert_eq!(lba, expected_lba);
            lbas.push(lba);
        }
    }
    let metadata_bytes = lbas.len() as u64 * geometry.metadata_bytes as u64;
    let control_bytes = Layout::for_geometry(&geometry).metadata_offset;
    assert!(metadata_bytes > 2 * control_bytes, "too few records to tell: {metadata_bytes} B");
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut resident_kib = 0u64;
    let mut ours = false;
    for line in smaps.lines() {
        if line.split_whitespace().next().is_some_and(|first| first.contains('-') && !first.ends_with(':')) {
            ours = line.ends_with(path.to_str().unwrap());
        } else if ours && line.starts_with("Rss:") {
            resident_kib += line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
        }
    }
    assert!(
        resident_kib * 1024 <= control_bytes,
        "{resident_kib} KiB of the device file resident in the process, the control area is {control_bytes} B"
    );
    let check = |device: &FileDevice| {
        let mut data = vec![0u8; 4096];
        let mut metadata = [0u8; 16];
        for &lba in &lbas {
            device.read(lba, &mut data, Some(&mut metadata)).unwrap();
            assert_eq!(metadata[..], record(lba)[..], "LBA {lba}'s record");
        }
    };
    check(&device);
    drop(device);
    check(&FileDevice::open(&path).unwrap());
}
