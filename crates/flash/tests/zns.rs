//! The ZNS model: zone rules (from `znswap_zoned::ZoneTable`), data placement and time.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use znswap_flash::{NandConfig, ZnsConfig, ZnsConfigError, ZnsSsd};
use znswap_zoned::{ZoneCondition, ZoneError};

const MIB: u64 = 1 << 20;
const MS: u64 = 1_000_000;

fn ssd() -> ZnsSsd {
    ZnsSsd::new(ZnsConfig::scaled(32, 16 * MIB)).unwrap()
}

#[test]
fn geometry_is_zn540_shaped() {
    let ssd = ZnsSsd::new(ZnsConfig::default()).unwrap();
    let g = ssd.geometry();
    assert_eq!((g.lba_bytes, g.metadata_bytes), (4096, 64));
    assert_eq!(g.zone_capacity_bytes(), 1077 * MIB);
    assert_eq!(g.zone_size_bytes(), 2048 * MIB);
    assert_eq!((g.max_open_zones, g.max_active_zones), (14, 14));
    let scaled = ZnsSsd::new(ZnsConfig::scaled(100, 64 * MIB)).unwrap().geometry();
    let ratio = scaled.zone_capacity_lbas as f64 / scaled.zone_size_lbas as f64;
    assert!((ratio - 1077.0 / 2048.0).abs() < 1e-3, "scaled zones keep the ZN540 ratio, got {ratio}");
}

#[test]
fn bad_config_is_refused_with_the_field_named() {
    let config = ZnsConfig { zone_capacity_bytes: 3 * MIB, zone_size_bytes: 2 * MIB, ..ZnsConfig::scaled(8, MIB) };
    assert!(matches!(ZnsSsd::new(config), Err(ZnsConfigError::Geometry(error)) if error.field == "zone-capacity"));
    let tiny_buffer = ZnsConfig {
        nand: NandConfig { write_buffer_bytes: 256 << 10, ..NandConfig::default() },
        ..ZnsConfig::scaled(32, 16 * MIB)
    };
    assert!(matches!(ZnsSsd::new(tiny_buffer), Err(ZnsConfigError::WriteBuffer { write_buffer_bytes: 262_144, .. })));
}

#[test]
fn append_returns_consecutive_lbas_and_enforces_zone_rules() {
    let mut ssd = ssd();
    let g = ssd.geometry();
    let (first, _) = ssd.append(0, 3, 5).unwrap();
    let (second, _) = ssd.append(0, 3, 2).unwrap();
    assert_eq!(first, g.zone_start_lba(3));
    assert_eq!(second, first + 5);
    assert!(matches!(ssd.write(0, first + 3, 1), Err(ZoneError::NotAtWritePointer { .. })));
    ssd.write(0, first + 7, 1).unwrap();
    assert!(matches!(ssd.append(0, 3, 0), Err(ZoneError::Empty { .. })));
    assert!(matches!(ssd.append(0, 3, 257), Err(ZoneError::AppendTooLarge { .. })), "1 MiB append limit");
    assert!(matches!(ssd.append(0, 99, 1), Err(ZoneError::InvalidZone { .. })));
    // 14 active zones at most.
    for zone in 10..23 {
        ssd.append(0, zone, 1).unwrap();
    }
    assert!(matches!(ssd.append(0, 23, 1), Err(ZoneError::TooManyActiveZones { .. })));
    ssd.finish(0, 10).unwrap();
    ssd.append(0, 23, 1).unwrap();
    assert_eq!(ssd.zone_info(10).condition, ZoneCondition::Full);
    assert!(matches!(ssd.append(0, 10, 1), Err(ZoneError::ZoneFull { .. })));
    let past = g.zone_start_lba(3) + g.zone_capacity_lbas - 1;
    assert!(matches!(ssd.read(0, past, 2), Err(ZoneError::CrossesZoneCapacity { .. })));
    ssd.zone_table().check_invariants();
}

#[test]
fn device_waf_is_exactly_one_for_any_append_reset_sequence() {
    for seed in 0..4 {
        let mut ssd = ssd();
        let g = ssd.geometry();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut now = 0;
        for _ in 0..20_000 {
            let zone = (rng.next_u64() % 16) as u32;
            let pick = rng.next_u64() % 100;
            let result = if pick < 85 {
                let pages = 1 + (rng.next_u64() % 64) as u32;
                ssd.append(now, zone, pages).map(|(_, done)| done)
            } else if pick < 95 {
                ssd.reset(now, zone)
            } else if pick < 98 {
                ssd.finish(now, zone)
            } else {
                ssd.read(now, g.zone_start_lba(zone), 1)
            };
            // Refusals (full zone, too many active zones) are part of the sequence.
            if let Ok(done) = result {
                assert!(done >= now);
            }
            now += 20_000;
        }
        let counters = ssd.counters();
        assert!(counters.host_pages_written > 100_000, "the sequence wrote data");
        assert_eq!(counters.media_pages_written, counters.host_pages_written, "seed {seed}");
        assert_eq!(counters.waf(), 1.0);
        assert_eq!(counters.gc_pages_copied, 0);
        assert!(counters.erases > 0);
        ssd.zone_table().check_invariants();
    }
}

#[test]
fn reset_erases_one_block_on_each_die_the_zone_wrote() {
    let mut ssd = ssd();
    let nand = ssd.nand_config();
    // Three program units (8 LBAs each) land on three dies.
    let (_, written) = ssd.append(0, 0, 24).unwrap();
    let done = ssd.reset(written, 0).unwrap();
    assert_eq!(ssd.counters().erases, 3);
    let erase = ssd.reset_erase_ns();
    // 16 MiB zones hold 512 KiB per die: 1/66 of a full ZN540 block, erased in 1/66 of tBERS.
    assert_eq!(erase, nand.erase_ns(512 << 10));
    assert!(erase > 50_000 && erase < nand.t_erase_ns / 60, "scaled erase time {erase} ns");
    assert!(done >= written + erase, "reset waits for the erases ({done} ns)");
    assert!(done < written + nand.t_prog_ns + erase + MS, "the dies erase in parallel ({done} ns)");
    // A full zone spans all 32 dies.
    let capacity = ssd.geometry().zone_capacity_lbas;
    let mut now = done;
    let mut left = capacity;
    while left > 0 {
        let pages = left.min(256) as u32;
        now = ssd.append(now, 1, pages).unwrap().1;
        left -= pages as u64;
    }
    ssd.reset(now, 1).unwrap();
    assert_eq!(ssd.counters().erases, 3 + 32);
    // Resetting an empty zone erases nothing.
    ssd.reset(now, 2).unwrap();
    assert_eq!(ssd.counters().erases, 3 + 32);
}

#[test]
fn a_read_waits_behind_a_program_on_its_die() {
    let mut ssd = ssd();
    let nand = ssd.nand_config();
    // Zone 0: 32 program units, one on every die, long programmed by t = 10 ms.
    ssd.append(0, 0, 256).unwrap();
    let now = 10 * MS;
    // Zone 1's first unit goes to die 1, the die holding zone 0's unit 1 (LBAs 8..16).
    let (_, appended) = ssd.append(now, 1, 8).unwrap();
    let zone0 = ssd.geometry().zone_start_lba(0);
    let busy_die = ssd.read(appended, zone0 + 8, 1).unwrap();
    let idle_die = ssd.read(appended, zone0 + 5 * 8, 1).unwrap();
    let read_alone = nand.t_read_ns + nand.transfer_ns(4096) + nand.t_command_ns;
    assert_eq!(idle_die, appended + read_alone, "a read on an idle die costs tR + transfer");
    assert!(busy_die >= now + nand.t_prog_ns, "the read on the programming die ends at {busy_die}");
}

#[test]
fn a_read_waits_behind_an_erase_on_its_die() {
    let mut ssd = ssd();
    let nand = ssd.nand_config();
    ssd.append(0, 0, 256).unwrap();
    ssd.append(0, 1, 8).unwrap(); // zone 1, unit 0: die 1
    let now = 10 * MS;
    ssd.reset(now, 1).unwrap();
    let zone0 = ssd.geometry().zone_start_lba(0);
    let behind_erase = ssd.read(now, zone0 + 8, 1).unwrap();
    assert!(behind_erase >= now + ssd.reset_erase_ns(), "read on the erasing die ends at {behind_erase}");
    let idle = ssd.read(now, zone0 + 5 * 8, 1).unwrap();
    assert_eq!(idle, now + nand.t_read_ns + nand.transfer_ns(4096) + nand.t_command_ns);
}

#[test]
fn full_size_zones_pay_the_full_erase_time() {
    let mut ssd = ZnsSsd::new(ZnsConfig { zone_count: 16, ..ZnsConfig::default() }).unwrap();
    let nand = ssd.nand_config();
    assert_eq!(ssd.reset_erase_ns(), nand.t_erase_ns);
    ssd.append(0, 0, 256).unwrap();
    let now = 10 * MS;
    let done = ssd.reset(now, 0).unwrap();
    assert_eq!(done, now + nand.t_erase_ns + nand.t_command_ns, "3.5 ms on all 32 dies at once");
    assert_eq!(ssd.counters().erases, 32);
}

#[test]
fn buffered_data_is_read_from_the_buffer() {
    let mut ssd = ssd();
    let (lba, done) = ssd.append(0, 0, 3).unwrap();
    let nand = ssd.nand_config();
    assert_eq!(ssd.read(done, lba, 3).unwrap(), done + nand.t_command_ns, "a partial unit waits in DRAM");
    assert_eq!(ssd.read(done, lba + 3, 5).unwrap(), done + nand.t_command_ns, "unwritten LBAs read as zeroes");
}

#[test]
fn writes_complete_at_buffer_speed_until_the_buffer_is_full() {
    let mut ssd = ssd();
    let buffer_appends = (ssd.nand_config().write_buffer_bytes / (128 << 10)) as usize;
    let mut completions = Vec::new();
    let mut zone = 0;
    for _ in 0..4 * buffer_appends {
        let (_, done) = match ssd.append(0, zone, 32) {
            Err(ZoneError::ExceedsCapacity { .. }) | Err(ZoneError::ZoneFull { .. }) => {
                zone += 1;
                ssd.append(0, zone, 32).unwrap()
            }
            result => result.unwrap(),
        };
        completions.push(done);
    }
    let command = ssd.nand_config().t_command_ns;
    assert!(completions[..buffer_appends].iter().all(|&done| done == command), "the first 4 MiB land in the buffer");
    let late = completions[4 * buffer_appends - 1];
    // The rest drain at program speed, about 1 GiB/s: 12 MiB take about 12 ms.
    assert!(late > 10 * MS && late < 15 * MS, "the last append completes at {late} ns");
}

#[test]
fn closing_a_zone_programs_its_partial_unit() {
    let mut ssd = ssd();
    let nand = ssd.nand_config();
    let (lba, done) = ssd.append(0, 4, 3).unwrap();
    let closed = ssd.close(done, 4).unwrap();
    assert_eq!(ssd.zone_info(4).condition, ZoneCondition::Closed);
    let read = ssd.read(closed, lba, 3).unwrap();
    assert!(read >= nand.t_prog_ns, "the data went to NAND: the read waits for its program ({read} ns)");
    // Appending again continues at the write pointer.
    let (next, _) = ssd.append(read, 4, 8).unwrap();
    assert_eq!(next, lba + 3);
    assert_eq!(ssd.counters().media_pages_written, ssd.counters().host_pages_written);
}
