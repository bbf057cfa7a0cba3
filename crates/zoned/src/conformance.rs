//! The conformance suite: what every [`ZonedDevice`] backend must do.
//!
//! Checks adapt to the device's geometry (zone sizes, limits, metadata), so the same
//! suite runs on the emulated devices, Linux zoned block devices and NVMe passthrough.
//! A backend supplies a [`Harness`]; `cargo test` files expand one `#[test]` per check
//! with [`conformance_tests!`](crate::conformance_tests), and `znswap device check`
//! runs [`CHECKS`] against a real device.
//!
//! A check whose feature the device lacks (no open limit, no metadata, no reopen, no
//! fault injection) passes vacuously and says so through [`Outcome::NotApplicable`];
//! test suites run each check on geometries where it applies.

use std::collections::BTreeSet;
use std::fmt::Debug;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::device::{FaultKind, ZonedDevice};
use crate::error::{Result, ZoneError};
use crate::geometry::Geometry;
use crate::merge::AppendMerger;
use crate::zone::{ZoneCondition, ZoneInfo, ZoneOp};

/// How the suite gets devices from a backend.
pub trait Harness {
    /// A device with every zone Empty (reset first if the storage is reused).
    fn fresh(&mut self) -> Box<dyn ZonedDevice>;
    /// Closes `device` and opens the same storage again; `None` if the backend keeps
    /// nothing across close.
    fn reopen(&mut self, device: Box<dyn ZonedDevice>) -> Option<Box<dyn ZonedDevice>>;
    /// Whether never-written LBAs (and LBAs past the write pointer after a reset) read
    /// as zeroes. True for the emulated devices; real devices may return another fill.
    fn unwritten_reads_zero(&self) -> bool {
        false
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// The device lacks what the check exercises; the reason says what.
    NotApplicable(&'static str),
}

pub type CheckResult = std::result::Result<Outcome, String>;

pub struct Check {
    pub name: &'static str,
    pub run: fn(&mut dyn Harness) -> CheckResult,
}

/// Every check, in a stable order.
pub const CHECKS: &[Check] = crate::__conformance_list!(__conformance_array);

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_list {
    ($callback:ident $($args:tt)*) => {
        $crate::$callback! { $($args)* ;
            reports_empty_zones,
            write_at_write_pointer,
            write_rules_change_nothing,
            fill_to_capacity_then_full,
            append_returns_lba,
            vectored_append_lands_as_one,
            append_limit,
            explicit_open_close_finish_reset,
            open_limit,
            active_limit,
            implicit_open_at_limit,
            metadata_round_trip,
            concurrent_appends_one_zone,
            merged_appends_one_zone,
            read_rules,
            unwritten_reads_zero,
            counters_track_io,
            persistence,
            failed_zones,
            injected_command_failures,
            invalid_transitions,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_array {
    (; $($check:ident),* $(,)?) => {
        &[$($crate::conformance::Check { name: stringify!($check), run: $crate::conformance::$check }),*]
    };
}

/// Expands to one `#[test]` per conformance check, each with a new harness from
/// `$make` (an expression, evaluated once per test). A check that does not apply to the
/// device (`Outcome::NotApplicable`) is not a pass: the checks named in
/// `not_applicable` are generated `#[ignore]`d (shown as ignored, and run by
/// `cargo test -- --ignored`, where they must still say they do not apply), and any
/// other check that says so fails, naming the list to put it in.
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!($make; not_applicable: []);
    };
    ($make:expr; not_applicable: [$($skip:ident),* $(,)?]) => {
        $crate::__conformance_tests_with! { ($) $make; [$($skip),*] }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests_with {
    (($d:tt) $make:expr; [$($skip:ident),*]) => {
        // One arm per check declared not applicable, then every other check.
        macro_rules! __conformance_test {
            $(
                ($skip) => {
                    #[test]
                    #[ignore = "not applicable to this device (declared in the test's not_applicable list)"]
                    fn $skip() {
                        let mut harness = $make;
                        $crate::conformance::expect_not_applicable(
                            &mut harness,
                            stringify!($skip),
                            $crate::conformance::$skip,
                        );
                    }
                };
            )*
            ($d check:ident) => {
                #[test]
                fn $d check() {
                    let mut harness = $make;
                    $crate::conformance::run_check(&mut harness, stringify!($d check), $crate::conformance::$d check);
                }
            };
        }
        $crate::__conformance_list!(__conformance_each);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_each {
    (; $($check:ident),* $(,)?) => {
        $( __conformance_test!($check); )*
    };
}

/// Runs one check that must apply and pass, panicking with its name and message
/// otherwise (for `#[test]`s).
pub fn run_check(harness: &mut dyn Harness, name: &str, check: fn(&mut dyn Harness) -> CheckResult) {
    match check(harness) {
        Ok(Outcome::Passed) => {}
        Ok(Outcome::NotApplicable(why)) => panic!(
            "conformance check {name} does not apply to this device ({why}): it tested nothing; if that is \
             right, add it to the test's not_applicable list"
        ),
        Err(message) => panic!("conformance check {name} failed: {message}"),
    }
}

/// Runs one check declared not applicable: it must still say so.
pub fn expect_not_applicable(harness: &mut dyn Harness, name: &str, check: fn(&mut dyn Harness) -> CheckResult) {
    match check(harness) {
        Ok(Outcome::NotApplicable(_)) => {}
        Ok(Outcome::Passed) => {
            panic!("conformance check {name} applies to this device now: drop it from the not_applicable list")
        }
        Err(message) => panic!("conformance check {name} failed: {message}"),
    }
}

/// Runs every check, returning each name with its result.
pub fn run_all(harness: &mut dyn Harness) -> Vec<(&'static str, CheckResult)> {
    CHECKS.iter().map(|check| (check.name, (check.run)(harness))).collect()
}

macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err(format!($($message)+));
        }
    };
}

/// `result` must be an error that `want` accepts.
fn expect_error<T: Debug>(
    result: Result<T>,
    want: impl Fn(&ZoneError) -> bool,
    what: &str,
) -> std::result::Result<(), String> {
    match result {
        Err(error) if want(&error) => Ok(()),
        Err(error) => Err(format!("{what}: wrong error: {error:?}")),
        Ok(value) => Err(format!("{what}: succeeded ({value:?}) but must fail")),
    }
}

fn ok<T>(result: Result<T>, what: &str) -> std::result::Result<T, String> {
    result.map_err(|error| format!("{what}: {error}"))
}

/// Deterministic bytes, different for every seed.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    Xoshiro256PlusPlus::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

fn metadata_for(geometry: &Geometry, seed: u64, data_len: usize) -> Vec<u8> {
    pattern(seed ^ 0xA5A5, data_len / geometry.lba_bytes as usize * geometry.metadata_bytes as usize)
}

fn granule(geometry: &Geometry) -> usize {
    geometry.write_granularity_bytes as usize
}

fn lbas(geometry: &Geometry, bytes: usize) -> u64 {
    bytes as u64 / geometry.lba_bytes as u64
}

fn condition(device: &dyn ZonedDevice, zone: u32) -> std::result::Result<ZoneCondition, String> {
    Ok(ok(device.report_zone(zone), "report zone")?.condition)
}

fn report(device: &dyn ZonedDevice) -> std::result::Result<Vec<ZoneInfo>, String> {
    ok(device.report_zones(), "report zones")
}

fn read_back(device: &dyn ZonedDevice, lba: u64, len: usize) -> std::result::Result<(Vec<u8>, Vec<u8>), String> {
    let geometry = device.geometry();
    let mut data = vec![0; len];
    let mut metadata = vec![0; lbas(geometry, len) as usize * geometry.metadata_bytes as usize];
    let metadata_arg = (geometry.metadata_bytes != 0).then_some(metadata.as_mut_slice());
    ok(device.read(lba, &mut data, metadata_arg), "read back")?;
    Ok((data, metadata))
}

/// Writes `len` bytes (pattern `seed`) at zone's write pointer with metadata.
fn write_pattern(device: &dyn ZonedDevice, zone: u32, len: usize, seed: u64) -> std::result::Result<u64, String> {
    let geometry = *device.geometry();
    let write_pointer = ok(device.report_zone(zone), "report zone")?.write_pointer_lba;
    let metadata = metadata_for(&geometry, seed, len);
    let metadata_arg = (geometry.metadata_bytes != 0).then_some(metadata.as_slice());
    ok(device.write(write_pointer, &pattern(seed, len), metadata_arg), "write at the write pointer")?;
    Ok(write_pointer)
}

/// Appends `len` bytes (pattern `seed`) with metadata; returns the LBA written.
fn append_pattern(device: &dyn ZonedDevice, zone: u32, len: usize, seed: u64) -> std::result::Result<u64, String> {
    let geometry = *device.geometry();
    let metadata = metadata_for(&geometry, seed, len);
    let metadata_arg = (geometry.metadata_bytes != 0).then_some(metadata.as_slice());
    ok(device.append(zone, &pattern(seed, len), metadata_arg), "append")
}

fn verify_pattern(device: &dyn ZonedDevice, lba: u64, len: usize, seed: u64) -> std::result::Result<(), String> {
    let geometry = *device.geometry();
    let (data, metadata) = read_back(device, lba, len)?;
    ensure!(data == pattern(seed, len), "data at LBA {lba} differs from what was written");
    ensure!(metadata == metadata_for(&geometry, seed, len), "metadata at LBA {lba} differs from what was written");
    Ok(())
}

/// The largest multiple of the granularity not above `bytes` (at least one granule).
fn chunk(geometry: &Geometry, bytes: u64) -> usize {
    let granule = geometry.write_granularity_bytes as u64;
    (bytes / granule).max(1) as usize * granule as usize
}

pub fn reports_empty_zones(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let zones = report(&*device)?;
    ensure!(
        zones.len() == geometry.zone_count as usize,
        "report has {} zones, geometry says {}",
        zones.len(),
        geometry.zone_count
    );
    for (index, zone) in zones.iter().enumerate() {
        let start = index as u64 * geometry.zone_size_lbas;
        ensure!(
            zone.zone == index as u32 && zone.start_lba == start,
            "zone {index} starts at {} not {start}",
            zone.start_lba
        );
        ensure!(
            zone.len_lbas == geometry.zone_size_lbas && zone.capacity_lbas == geometry.zone_capacity_lbas,
            "zone {index} size/capacity differ from geometry"
        );
        ensure!(
            zone.condition == ZoneCondition::Empty && zone.write_pointer_lba == start,
            "zone {index} is not empty: {zone:?}"
        );
        ensure!(ok(device.report_zone(index as u32), "report zone")? == *zone, "single-zone report of {index} differs");
    }
    expect_error(
        device.report_zone(geometry.zone_count),
        |e| matches!(e, ZoneError::InvalidZone { .. }),
        "report past the last zone",
    )?;
    Ok(Outcome::Passed)
}

pub fn write_at_write_pointer(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let g = granule(&geometry);
    let zone = geometry.zone_count - 1;
    let start = geometry.zone_start_lba(zone);
    ensure!(write_pattern(&*device, zone, g, 1)? == start, "first write not at the zone start");
    let info = ok(device.report_zone(zone), "report")?;
    ensure!(
        info.condition == ZoneCondition::ImplicitlyOpened,
        "a written zone must be implicitly opened, is {}",
        info.condition
    );
    ensure!(info.write_pointer_lba == start + lbas(&geometry, g), "write pointer did not advance by one granule");
    verify_pattern(&*device, start, g, 1)?;
    if geometry.zone_capacity_bytes() >= 2 * g as u64 {
        let before = report(&*device)?;
        expect_error(
            device.write(start, &pattern(9, g), None),
            |e| matches!(e, ZoneError::NotAtWritePointer { .. }),
            "rewrite at the zone start",
        )?;
        if geometry.zone_capacity_bytes() >= 3 * g as u64 {
            let skip = start + 2 * lbas(&geometry, g);
            expect_error(
                device.write(skip, &pattern(9, g), None),
                |e| matches!(e, ZoneError::NotAtWritePointer { .. }),
                "write past the write pointer",
            )?;
        }
        ensure!(report(&*device)? == before, "a refused write changed the zones");
        write_pattern(&*device, zone, g, 2)?;
        verify_pattern(&*device, start, g, 1)?;
        verify_pattern(&*device, start + lbas(&geometry, g), g, 2)?;
    }
    Ok(Outcome::Passed)
}

pub fn write_rules_change_nothing(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let g = granule(&geometry);
    write_pattern(&*device, 0, g, 3)?;
    let before = report(&*device)?;
    let counters = device.counters();
    let write_pointer = before[0].write_pointer_lba;
    expect_error(device.write(write_pointer, &[], None), |e| matches!(e, ZoneError::Empty { .. }), "empty write")?;
    expect_error(
        device.write(write_pointer, &[1; 100], None),
        |e| matches!(e, ZoneError::Misaligned { .. }),
        "write of 100 B",
    )?;
    if g > geometry.lba_bytes as usize {
        expect_error(
            device.write(write_pointer, &vec![1; geometry.lba_bytes as usize], None),
            |e| matches!(e, ZoneError::Misaligned { .. }),
            "write below the write granularity",
        )?;
        expect_error(
            device.append(0, &vec![1; g + geometry.lba_bytes as usize], None),
            |e| matches!(e, ZoneError::Misaligned { .. }),
            "append not a multiple of the granularity",
        )?;
    }
    expect_error(
        device.write(geometry.total_lbas(), &pattern(4, g), None),
        |e| matches!(e, ZoneError::LbaOutOfRange { .. }),
        "write past the device",
    )?;
    if geometry.metadata_bytes != 0 {
        expect_error(
            device.write(write_pointer, &pattern(4, g), Some(&[0; 3])),
            |e| matches!(e, ZoneError::MetadataLength { .. }),
            "write with short metadata",
        )?;
    }
    ensure!(report(&*device)? == before, "refused writes changed the zones");
    let after = device.counters();
    ensure!(after.bytes_written == counters.bytes_written, "refused writes were counted as written");
    Ok(Outcome::Passed)
}

pub fn fill_to_capacity_then_full(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let zone = 0;
    let start = geometry.zone_start_lba(zone);
    let capacity = geometry.zone_capacity_bytes();
    let step = chunk(&geometry, (geometry.zone_append_max_bytes as u64).min(capacity));
    let mut written = 0u64;
    let mut seed = 100;
    while written < capacity {
        let remaining = capacity - written;
        if remaining < step as u64 {
            let too_much = remaining as usize + granule(&geometry);
            expect_error(
                device.write(start + lbas(&geometry, written as usize), &pattern(0, too_much), None),
                |e| matches!(e, ZoneError::ExceedsCapacity { .. }),
                "write past the zone capacity",
            )?;
        }
        let len = step.min(remaining as usize);
        write_pattern(&*device, zone, len, seed)?;
        written += len as u64;
        seed += 1;
    }
    let info = ok(device.report_zone(zone), "report")?;
    ensure!(info.condition == ZoneCondition::Full, "a zone written to capacity must be Full, is {}", info.condition);
    ensure!(
        info.written_lbas() == geometry.zone_capacity_lbas,
        "full zone reports {} written LBAs",
        info.written_lbas()
    );
    let g = granule(&geometry);
    expect_error(
        device.append(zone, &pattern(0, g), None),
        |e| matches!(e, ZoneError::ZoneFull { .. }),
        "append to a full zone",
    )?;
    expect_error(
        device.write(start, &pattern(0, g), None),
        |e| matches!(e, ZoneError::ZoneFull { .. } | ZoneError::NotAtWritePointer { .. }),
        "write to a full zone",
    )?;
    verify_pattern(&*device, start, step.min(capacity as usize), 100)?;
    Ok(Outcome::Passed)
}

pub fn append_returns_lba(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let g = granule(&geometry);
    let zone = geometry.zone_count / 2;
    let start = geometry.zone_start_lba(zone);
    let sizes = [g, chunk(&geometry, (2 * g as u64).min(geometry.zone_append_max_bytes as u64)), g];
    let mut expected = start;
    for (i, &len) in sizes.iter().enumerate() {
        if expected + lbas(&geometry, len) > start + geometry.zone_capacity_lbas {
            break;
        }
        let metadata = metadata_for(&geometry, i as u64, len);
        let metadata_arg = (geometry.metadata_bytes != 0).then_some(metadata.as_slice());
        let lba = ok(device.append(zone, &pattern(i as u64, len), metadata_arg), "append")?;
        ensure!(lba == expected, "append {i} returned LBA {lba}, expected {expected} (the write pointer)");
        expected += lbas(&geometry, len);
    }
    let mut lba = start;
    for (i, &len) in sizes.iter().enumerate() {
        if lba >= expected {
            break;
        }
        verify_pattern(&*device, lba, len, i as u64)?;
        lba += lbas(&geometry, len);
    }
    expect_error(
        device.append(geometry.zone_count, &pattern(0, g), None),
        |e| matches!(e, ZoneError::InvalidZone { .. }),
        "append to a zone past the last",
    )?;
    Ok(Outcome::Passed)
}

/// `append_vectored` writes its pieces as one append: contiguous, at the write pointer,
/// whatever the pieces' alignment (page-aligned pieces, and one that is not).
pub fn vectored_append_lands_as_one(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let g = granule(&geometry);
    let zone = geometry.zone_count / 2;
    let start = geometry.zone_start_lba(zone);
    let pieces_max = (geometry.zone_append_max_bytes as usize / g).min(4);
    if pieces_max < 2 || (2 * pieces_max * g) as u64 >= geometry.zone_capacity_bytes() {
        return Ok(Outcome::NotApplicable(
            "the append limit is under two granules, or a zone holds no more than two such appends",
        ));
    }
    let mut expected = start;
    for (seed, aligned) in [(7u64, true), (8, false)] {
        let whole = pattern(seed, pieces_max * g);
        let aligned_copies: Vec<crate::AlignedBuf> = whole.chunks(g).map(crate::AlignedBuf::copy_of).collect();
        // Unaligned: slices of a Vec at an odd offset.
        let mut shifted = vec![0u8; whole.len() + 1];
        shifted[1..].copy_from_slice(&whole);
        let pieces: Vec<std::io::IoSlice<'_>> = if aligned {
            aligned_copies.iter().map(|piece| std::io::IoSlice::new(piece)).collect()
        } else {
            shifted[1..].chunks(g).map(std::io::IoSlice::new).collect()
        };
        let metadata = metadata_for(&geometry, seed, whole.len());
        let metadata_arg = (geometry.metadata_bytes != 0).then_some(metadata.as_slice());
        let lba = ok(device.append_vectored(zone, &pieces, metadata_arg), "vectored append")?;
        ensure!(lba == expected, "vectored append returned LBA {lba}, expected {expected} (the write pointer)");
        verify_pattern(&*device, lba, whole.len(), seed)?;
        expected += lbas(&geometry, whole.len());
    }
    let info = ok(device.report_zone(zone), "report")?;
    ensure!(
        info.write_pointer_lba == expected,
        "write pointer {} after the vectored appends, expected {expected}",
        info.write_pointer_lba
    );
    Ok(Outcome::Passed)
}

pub fn append_limit(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let too_large = geometry.zone_append_max_bytes as usize + granule(&geometry);
    if too_large as u64 > geometry.zone_capacity_bytes() {
        // Still refused, for one reason or the other.
        expect_error(
            device.append(0, &vec![0; too_large], None),
            |e| matches!(e, ZoneError::AppendTooLarge { .. } | ZoneError::ExceedsCapacity { .. }),
            "append above the limit",
        )?;
    } else {
        expect_error(
            device.append(0, &vec![0; too_large], None),
            |e| matches!(e, ZoneError::AppendTooLarge { .. }),
            "append above the zone append limit",
        )?;
    }
    ensure!(condition(&*device, 0)? == ZoneCondition::Empty, "a refused append opened the zone");
    let largest = geometry.zone_append_max_bytes as usize;
    let lba = ok(device.append(0, &pattern(7, largest), None), "append of exactly the limit")?;
    ensure!(lba == 0, "first append of zone 0 at LBA {lba}");
    Ok(Outcome::Passed)
}

pub fn explicit_open_close_finish_reset(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let g = granule(&geometry);
    let zone = 0;
    let start = geometry.zone_start_lba(zone);
    ok(device.open(zone), "open an empty zone")?;
    ensure!(
        condition(&*device, zone)? == ZoneCondition::ExplicitlyOpened,
        "open did not make the zone explicitly opened"
    );
    ok(device.close(zone), "close an opened, unwritten zone")?;
    let closed = condition(&*device, zone)?;
    ensure!(matches!(closed, ZoneCondition::Empty | ZoneCondition::Closed), "closing an unwritten zone gave {closed}");
    if geometry.zone_capacity_bytes() > g as u64 {
        write_pattern(&*device, zone, g, 11)?;
        ok(device.close(zone), "close a written zone")?;
        let info = ok(device.report_zone(zone), "report")?;
        ensure!(
            info.condition == ZoneCondition::Closed && info.write_pointer_lba == start + lbas(&geometry, g),
            "closed zone: {info:?}"
        );
        ok(device.open(zone), "reopen a closed zone")?;
        ensure!(condition(&*device, zone)? == ZoneCondition::ExplicitlyOpened, "open of a closed zone");
        ensure!(
            ok(device.append(zone, &pattern(12, g), None), "append to an explicitly opened zone")?
                == start + lbas(&geometry, g),
            "append after reopen is not at the write pointer"
        );
    }
    ok(device.finish(zone), "finish")?;
    let info = ok(device.report_zone(zone), "report")?;
    ensure!(info.condition == ZoneCondition::Full, "finished zone is {}", info.condition);
    expect_error(
        device.append(zone, &pattern(0, g), None),
        |e| matches!(e, ZoneError::ZoneFull { .. }),
        "append to a finished zone",
    )?;
    ok(device.reset(zone), "reset")?;
    let info = ok(device.report_zone(zone), "report")?;
    ensure!(info.condition == ZoneCondition::Empty && info.write_pointer_lba == start, "reset zone: {info:?}");
    ok(device.finish(1), "finish an empty zone")?;
    ensure!(condition(&*device, 1)? == ZoneCondition::Full, "finish of an empty zone must make it full");
    ok(device.reset(1), "reset a finished zone")?;
    ok(device.reset(1), "reset an empty zone")?;
    ensure!(condition(&*device, 1)? == ZoneCondition::Empty, "double reset");
    Ok(Outcome::Passed)
}

pub fn open_limit(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let max_open = geometry.max_open_zones;
    if max_open == 0 || max_open >= geometry.zone_count {
        return Ok(Outcome::NotApplicable("no open-zone limit below the zone count"));
    }
    for zone in 0..max_open {
        ok(device.open(zone), "open up to the limit")?;
    }
    let before = report(&*device)?;
    // With as many active as open zones, the active limit may be the one that refuses.
    let refused = |e: &ZoneError| {
        matches!(e, ZoneError::TooManyOpenZones { .. })
            || (geometry.max_active_zones == max_open && matches!(e, ZoneError::TooManyActiveZones { .. }))
    };
    expect_error(device.open(max_open), refused, "explicit open past the limit")?;
    let g = granule(&geometry);
    expect_error(device.append(max_open, &pattern(0, g), None), refused, "append opening a zone past the limit")?;
    ensure!(report(&*device)? == before, "refused opens changed the zones");
    ok(device.close(0), "close one open zone")?;
    // A closed, unwritten zone may stay active (the spec allows Closed or Empty): reset it.
    ok(device.reset(0), "reset the closed zone")?;
    ok(device.open(max_open), "open after closing one")?;
    Ok(Outcome::Passed)
}

pub fn active_limit(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let max_active = geometry.max_active_zones;
    let g = granule(&geometry);
    if max_active == 0 || max_active >= geometry.zone_count {
        return Ok(Outcome::NotApplicable("no active-zone limit below the zone count"));
    }
    if geometry.zone_capacity_bytes() <= g as u64 {
        return Ok(Outcome::NotApplicable("a one-granule zone is full after one write"));
    }
    for zone in 0..max_active {
        write_pattern(&*device, zone, g, zone as u64)?;
        ok(device.close(zone), "close a written zone")?;
    }
    let before = report(&*device)?;
    expect_error(
        device.append(max_active, &pattern(0, g), None),
        |e| matches!(e, ZoneError::TooManyActiveZones { .. }),
        "append activating a zone past the limit",
    )?;
    expect_error(
        device.open(max_active),
        |e| matches!(e, ZoneError::TooManyActiveZones { .. }),
        "open activating a zone past the limit",
    )?;
    ensure!(report(&*device)? == before, "refused activations changed the zones");
    // Closed zones may still be written: they are active already.
    write_pattern(&*device, 0, g, 50)?;
    ok(device.finish(0), "finish an active zone")?;
    write_pattern(&*device, max_active, g, 51)?;
    Ok(Outcome::Passed)
}

pub fn implicit_open_at_limit(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let max_open = geometry.max_open_zones;
    let g = granule(&geometry);
    if max_open == 0 || max_open >= geometry.zone_count || geometry.zone_capacity_bytes() <= g as u64 {
        return Ok(Outcome::NotApplicable("no open-zone limit below the zone count"));
    }
    for zone in 0..max_open {
        write_pattern(&*device, zone, g, zone as u64)?;
    }
    let before = report(&*device)?;
    match device.append(max_open, &pattern(0, g), None) {
        // The device closed an implicitly opened zone to make room (allowed by the spec).
        Ok(_) => {
            let after = report(&*device)?;
            let open = after.iter().filter(|z| z.condition.is_open()).count() as u32;
            ensure!(open <= max_open, "{open} zones open with a limit of {max_open}");
            let closed = after.iter().filter(|z| z.condition == ZoneCondition::Closed).count();
            ensure!(closed == 1, "exactly one zone must have been implicitly closed, {closed} were");
        }
        Err(ZoneError::TooManyOpenZones { .. } | ZoneError::TooManyActiveZones { .. }) => {
            ensure!(report(&*device)? == before, "a refused append changed the zones");
        }
        Err(error) => return Err(format!("append past the open limit: unexpected error {error}")),
    }
    Ok(Outcome::Passed)
}

pub fn metadata_round_trip(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let g = granule(&geometry);
    if geometry.metadata_bytes == 0 {
        expect_error(
            device.append(0, &pattern(0, g), Some(&[1; 8])),
            |e| matches!(e, ZoneError::MetadataLength { .. }),
            "metadata on a device without metadata",
        )?;
        ok(device.append(0, &pattern(0, g), Some(&[])), "empty metadata on a device without metadata")?;
        return Ok(Outcome::NotApplicable("the device has no per-LBA metadata"));
    }
    let lba = write_pattern(&*device, 0, g, 21)?;
    verify_pattern(&*device, lba, g, 21)?;
    let metadata = metadata_for(&geometry, 22, g);
    let appended = ok(device.append(0, &pattern(22, g), Some(&metadata)), "append with metadata")?;
    verify_pattern(&*device, appended, g, 22)?;
    let plain = ok(device.append(0, &pattern(23, g), None), "append without metadata")?;
    let (_, read_metadata) = read_back(&*device, plain, g)?;
    ensure!(read_metadata.iter().all(|&b| b == 0), "metadata of a write without metadata must read as zeroes");
    // Per-LBA granularity: reading one LBA gives that LBA's metadata.
    let one = geometry.lba_bytes as usize;
    let mut data = vec![0; one];
    let mut single = vec![0; geometry.metadata_bytes as usize];
    ok(device.read(appended, &mut data, Some(&mut single)), "read one LBA with metadata")?;
    ensure!(single[..] == metadata[..geometry.metadata_bytes as usize], "metadata of a single LBA differs");
    expect_error(
        device.append(0, &pattern(0, g), Some(&metadata[1..])),
        |e| matches!(e, ZoneError::MetadataLength { .. }),
        "append with metadata one byte short",
    )?;
    expect_error(
        device.read(appended, &mut data, Some(&mut [0; 1])),
        |e| matches!(e, ZoneError::MetadataLength { .. }),
        "read with a wrong metadata buffer",
    )?;
    Ok(Outcome::Passed)
}

/// `threads` threads append `per_thread` granules each to one zone through `device`;
/// checks that the LBAs tile the zone and each holds its writer's bytes.
fn appends_tile_zone(device: &dyn ZonedDevice, threads: usize, zone: u32) -> std::result::Result<(), String> {
    let geometry = *device.geometry();
    let g = granule(&geometry);
    let per_thread = ((geometry.zone_capacity_bytes() / g as u64) as usize / threads).min(64);
    if per_thread == 0 {
        return Err("zone too small for the concurrency check".into());
    }
    let results: Vec<std::result::Result<Vec<u64>, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                scope.spawn(move || {
                    (0..per_thread)
                        .map(|i| {
                            let seed = (thread * 1000 + i) as u64;
                            let metadata = metadata_for(&geometry, seed, g);
                            let metadata_arg = (geometry.metadata_bytes != 0).then_some(metadata.as_slice());
                            ok(device.append(zone, &pattern(seed, g), metadata_arg), "concurrent append")
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("append thread panicked".into()))).collect()
    });
    let start = geometry.zone_start_lba(zone);
    let step = lbas(&geometry, g);
    let mut seen = BTreeSet::new();
    for (thread, lbas_written) in results.into_iter().enumerate() {
        for (i, lba) in lbas_written?.into_iter().enumerate() {
            ensure!(seen.insert(lba), "LBA {lba} returned twice");
            verify_pattern(device, lba, g, (thread * 1000 + i) as u64)?;
        }
    }
    let expected: BTreeSet<u64> = (0..(threads * per_thread) as u64).map(|i| start + i * step).collect();
    ensure!(seen == expected, "appended LBAs do not tile the zone from its start");
    let info = ok(device.report_zone(zone), "report")?;
    ensure!(
        info.written_lbas() == (threads * per_thread) as u64 * step,
        "write pointer does not match the appended total"
    );
    Ok(())
}

pub fn concurrent_appends_one_zone(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    appends_tile_zone(&*device, 4, 0)?;
    Ok(Outcome::Passed)
}

pub fn merged_appends_one_zone(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let merger = AppendMerger::new(&*device, 2);
    appends_tile_zone(&merger, 4, 1.min(device.geometry().zone_count - 1))?;
    let stats = merger.stats();
    ensure!(stats.device_appends >= 1 && stats.device_appends <= stats.requests, "merge stats inconsistent: {stats:?}");
    Ok(Outcome::Passed)
}

pub fn read_rules(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let lba = geometry.lba_bytes as usize;
    write_pattern(&*device, 0, granule(&geometry), 31)?;
    let mut one = vec![0; lba];
    expect_error(device.read(0, &mut [], None), |e| matches!(e, ZoneError::Empty { .. }), "empty read")?;
    expect_error(device.read(0, &mut [0; 100], None), |e| matches!(e, ZoneError::Misaligned { .. }), "read of 100 B")?;
    expect_error(
        device.read(geometry.total_lbas(), &mut one, None),
        |e| matches!(e, ZoneError::LbaOutOfRange { .. }),
        "read past the device",
    )?;
    if geometry.zone_count > 1 {
        let last = geometry.zone_start_lba(0) + geometry.zone_capacity_lbas - 1;
        expect_error(
            device.read(last, &mut vec![0; 2 * lba], None),
            |e| matches!(e, ZoneError::CrossesZoneCapacity { .. }),
            "read across the end of a zone's capacity",
        )?;
    }
    ok(device.read(0, &mut one, None), "read of one LBA")?;
    ensure!(one == pattern(31, lba), "first LBA differs from what was written");
    Ok(Outcome::Passed)
}

pub fn unwritten_reads_zero(harness: &mut dyn Harness) -> CheckResult {
    if !harness.unwritten_reads_zero() {
        return Ok(Outcome::NotApplicable("the backend does not promise zeroes for unwritten LBAs"));
    }
    let device = harness.fresh();
    let geometry = *device.geometry();
    let g = granule(&geometry);
    let (data, metadata) = read_back(&*device, 0, g)?;
    ensure!(data.iter().all(|&b| b == 0) && metadata.iter().all(|&b| b == 0), "a never-written granule is not zero");
    write_pattern(&*device, 0, g, 41)?;
    ok(device.reset(0), "reset")?;
    let (data, metadata) = read_back(&*device, 0, g)?;
    ensure!(data.iter().all(|&b| b == 0) && metadata.iter().all(|&b| b == 0), "data survived a reset");
    Ok(Outcome::Passed)
}

pub fn counters_track_io(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let g = granule(&geometry) as u64;
    let zone = 0;
    if geometry.zone_capacity_bytes() < 2 * g {
        return Ok(Outcome::NotApplicable("a zone must hold two granules"));
    }
    let other = 1.min(geometry.zone_count - 1);
    let before = device.counters();
    let zone_before = ok(device.zone_counters(zone), "zone counters")?;
    let other_before = ok(device.zone_counters(other), "zone counters")?;
    write_pattern(&*device, zone, g as usize, 1)?;
    ok(device.append(zone, &pattern(2, g as usize), None), "append")?;
    read_back(&*device, 0, g as usize)?;
    ok(device.finish(zone), "finish")?;
    ok(device.reset(zone), "reset")?;
    let after = device.counters();
    let zone_after = ok(device.zone_counters(zone), "zone counters")?;
    ensure!(
        after.bytes_written - before.bytes_written == 2 * g,
        "bytes written grew by {}",
        after.bytes_written - before.bytes_written
    );
    ensure!(
        after.writes - before.writes == 1 && after.appends - before.appends == 1,
        "writes/appends not counted once each"
    );
    ensure!(after.bytes_read - before.bytes_read == g && after.reads - before.reads == 1, "read not counted");
    ensure!(after.resets - before.resets == 1 && after.finishes - before.finishes == 1, "reset/finish not counted");
    ensure!(
        zone_after.resets - zone_before.resets == 1 && zone_after.finishes - zone_before.finishes == 1,
        "zone reset/finish not counted"
    );
    ensure!(
        zone_after.bytes_written - zone_before.bytes_written == 2 * g && zone_after.appends - zone_before.appends == 1,
        "zone writes not counted"
    );
    if other != zone {
        ensure!(ok(device.zone_counters(other), "zone counters")? == other_before, "another zone's counters moved");
    }
    expect_error(
        device.zone_counters(geometry.zone_count),
        |e| matches!(e, ZoneError::InvalidZone { .. }),
        "counters of a zone past the last",
    )?;
    Ok(Outcome::Passed)
}

pub fn persistence(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let g = granule(&geometry);
    if geometry.zone_count < 4 || geometry.zone_capacity_bytes() < 2 * g as u64 {
        return Ok(Outcome::NotApplicable("needs four zones of two granules"));
    }
    let resets_before = ok(device.zone_counters(3), "counters")?.resets;
    for _ in 0..2 {
        write_pattern(&*device, 3, g, 63)?;
        ok(device.reset(3), "reset")?;
    }
    let first = write_pattern(&*device, 0, g, 61)?;
    write_pattern(&*device, 1, g, 62)?;
    ok(device.finish(1), "finish")?;
    ok(device.open(2), "open")?;
    ok(device.sync(), "sync")?;
    let counters = device.counters();
    let Some(device) = harness.reopen(device) else {
        return Ok(Outcome::NotApplicable("the backend keeps nothing across close"));
    };
    if device.counters_persist() {
        ensure!(device.counters() == counters, "device counters changed across reopen");
        ensure!(
            ok(device.zone_counters(3), "counters")?.resets == resets_before + 2,
            "zone wear (reset count) lost across reopen"
        );
    }
    let zones = report(&*device)?;
    // An emulated device reopens as after a power cycle (open zones come back Closed or
    // Empty); a real one reopened without a power cycle keeps them open.
    ensure!(
        matches!(zones[0].condition, ZoneCondition::Closed | ZoneCondition::ImplicitlyOpened),
        "an open, written zone came back {}",
        zones[0].condition
    );
    ensure!(zones[0].write_pointer_lba == first + lbas(&geometry, g), "write pointer lost across reopen");
    ensure!(zones[1].condition == ZoneCondition::Full, "full zone came back {}", zones[1].condition);
    ensure!(
        matches!(zones[2].condition, ZoneCondition::Empty | ZoneCondition::ExplicitlyOpened),
        "an open, unwritten zone came back {}",
        zones[2].condition
    );
    ensure!(zones[3].condition == ZoneCondition::Empty, "reset zone came back {}", zones[3].condition);
    verify_pattern(&*device, first, g, 61)?;
    verify_pattern(&*device, geometry.zone_start_lba(1), g, 62)?;
    // The reopened device keeps working where it left off.
    ensure!(write_pattern(&*device, 0, g, 64)? == first + lbas(&geometry, g), "writing after reopen");
    Ok(Outcome::Passed)
}

pub fn failed_zones(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let Some(faults) = device.fault_injector() else {
        return Ok(Outcome::NotApplicable("the backend cannot inject faults"));
    };
    if geometry.zone_count < 3 {
        return Ok(Outcome::NotApplicable("needs three zones"));
    }
    let g = granule(&geometry);
    write_pattern(&*device, 0, g, 71)?;
    write_pattern(&*device, 1, g, 72)?;
    faults.fail_zone(0, ZoneCondition::Offline);
    faults.fail_zone(1, ZoneCondition::ReadOnly);
    ensure!(
        condition(&*device, 0)? == ZoneCondition::Offline && condition(&*device, 1)? == ZoneCondition::ReadOnly,
        "failed zones not reported"
    );
    let mut buffer = vec![0; g];
    expect_error(
        device.read(0, &mut buffer, None),
        |e| matches!(e, ZoneError::ZoneOffline { .. }),
        "read of an offline zone",
    )?;
    expect_error(
        device.append(0, &buffer, None),
        |e| matches!(e, ZoneError::ZoneOffline { .. }),
        "append to an offline zone",
    )?;
    expect_error(device.reset(0), |e| matches!(e, ZoneError::ZoneOffline { .. }), "reset of an offline zone")?;
    verify_pattern(&*device, geometry.zone_start_lba(1), g, 72)?;
    expect_error(
        device.append(1, &buffer, None),
        |e| matches!(e, ZoneError::ZoneReadOnly { .. }),
        "append to a read-only zone",
    )?;
    expect_error(device.reset(1), |e| matches!(e, ZoneError::ZoneReadOnly { .. }), "reset of a read-only zone")?;
    // Failed zones gave back their open/active resources.
    let zones = report(&*device)?;
    ensure!(zones.iter().filter(|z| z.condition.is_active()).count() == 0, "failed zones still count as active");
    ok(device.append(2, &buffer, None), "append to a healthy zone")?;
    ok(device.reset_all(), "reset all with failed zones present")?;
    Ok(Outcome::Passed)
}

pub fn injected_command_failures(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    let Some(faults) = device.fault_injector() else {
        return Ok(Outcome::NotApplicable("the backend cannot inject faults"));
    };
    let g = granule(&geometry);
    let before = report(&*device)?;
    faults.fail_next(FaultKind::Append, 1);
    expect_error(
        device.append(0, &pattern(81, g), None),
        |e| matches!(e, ZoneError::Injected { .. }),
        "injected append failure",
    )?;
    ensure!(report(&*device)? == before, "a failed append moved a write pointer");
    ensure!(append_pattern(&*device, 0, g, 82)? == 0, "append after an injected failure not at the zone start");
    faults.fail_next(FaultKind::Write, 1);
    let write_pointer = lbas(&geometry, g);
    expect_error(
        device.write(write_pointer, &pattern(83, g), None),
        |e| matches!(e, ZoneError::Injected { .. }),
        "injected write failure",
    )?;
    faults.fail_next(FaultKind::Read, 1);
    expect_error(
        device.read(0, &mut vec![0; g], None),
        |e| matches!(e, ZoneError::Injected { .. }),
        "injected read failure",
    )?;
    verify_pattern(&*device, 0, g, 82).map_err(|e| format!("after an injected read failure: {e}"))?;
    faults.fail_next(FaultKind::Reset, 1);
    expect_error(device.reset(0), |e| matches!(e, ZoneError::Injected { .. }), "injected reset failure")?;
    ensure!(condition(&*device, 0)? == ZoneCondition::ImplicitlyOpened, "a failed reset changed the zone");
    ok(device.reset(0), "reset after a failure")?;
    Ok(Outcome::Passed)
}

pub fn invalid_transitions(harness: &mut dyn Harness) -> CheckResult {
    let device = harness.fresh();
    let geometry = *device.geometry();
    for op in [ZoneOp::Reset, ZoneOp::Open, ZoneOp::Close, ZoneOp::Finish] {
        expect_error(
            device.zone_op(geometry.zone_count, op),
            |e| matches!(e, ZoneError::InvalidZone { .. }),
            "zone operation past the last zone",
        )?;
    }
    ok(device.finish(0), "finish")?;
    let before = report(&*device)?;
    expect_error(device.open(0), |e| matches!(e, ZoneError::InvalidTransition { .. }), "open of a full zone")?;
    expect_error(device.close(0), |e| matches!(e, ZoneError::InvalidTransition { .. }), "close of a full zone")?;
    ensure!(report(&*device)? == before, "refused transitions changed the zones");
    Ok(Outcome::Passed)
}
