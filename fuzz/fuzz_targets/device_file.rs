//! A device file an earlier run, or an attacker, left behind: `FileDevice::open` on a
//! file whose header and zone table come from the input answers a device or a clear
//! error, never a panic or an out-of-bounds access; a device it opens reports zones
//! within its geometry and reads where they say data is. The header's checksum is fixed
//! up in most inputs, so the geometry, layout and zone-table checks behind it are
//! reached (start from the corpus: a real header).
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use znswap_zoned::file::{HEADER_BYTES, ZONE_ENTRY_BYTES};
use znswap_zoned::{FileDevice, ZonedDevice};

const OFF_CHECKSUM: usize = 12;
const OFF_ZONE_COUNT: usize = 24;
const OFF_FILE_BYTES: usize = 88;
/// Larger claimed files are not made (the open refuses a file shorter than its header
/// says, which the input can still ask for by leaving the length short).
const FILE_BYTES_MAX: u64 = 1 << 36;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, body)) = input.split_first() else { return };
    let mut header = vec![0u8; HEADER_BYTES as usize];
    let head = body.len().min(header.len());
    header[..head].copy_from_slice(&body[..head]);
    let table = &body[head..];
    if mode & 1 == 0 {
        header[OFF_CHECKSUM..OFF_CHECKSUM + 4].fill(0);
        let crc = crc32c::crc32c(&header);
        header[OFF_CHECKSUM..OFF_CHECKSUM + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let zone_count = u32::from_le_bytes(header[OFF_ZONE_COUNT..OFF_ZONE_COUNT + 4].try_into().unwrap()) as u64;
    let claimed = u64::from_le_bytes(header[OFF_FILE_BYTES..OFF_FILE_BYTES + 8].try_into().unwrap());
    let mut file = tempfile::NamedTempFile::new_in("/dev/shm").expect("a temporary file");
    file.write_all(&header).unwrap();
    // The zone table: the input's bytes, then zeroes (an empty entry is invalid: its
    // condition is 0), up to the zones the header claims.
    let table_bytes = (zone_count * ZONE_ENTRY_BYTES).min(1 << 20) as usize;
    let mut entries = vec![0u8; table_bytes];
    let given = table.len().min(table_bytes);
    entries[..given].copy_from_slice(&table[..given]);
    file.write_all(&entries).unwrap();
    if mode & 2 == 0 && claimed <= FILE_BYTES_MAX && claimed > HEADER_BYTES + table_bytes as u64 {
        file.as_file().set_len(claimed).unwrap();
    }
    let Ok(device) = FileDevice::open(file.path()) else { return };
    let geometry = *device.geometry();
    let zones = device.report_zones().expect("a device that opened reports its zones");
    assert_eq!(zones.len() as u64, geometry.zone_count as u64);
    let mut page = vec![0u8; geometry.lba_bytes as usize];
    for (zone, info) in zones.iter().enumerate().take(64) {
        assert!(info.written_lbas() <= geometry.zone_capacity_lbas, "zone {zone}: {info:?}");
        if info.written_lbas() > 0 && info.condition != znswap_zoned::ZoneCondition::Offline {
            let _ = device.read(geometry.zone_start_lba(zone as u32), &mut page, None);
        }
    }
});
