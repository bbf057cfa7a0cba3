//! A fault-injecting wrapper for any [`ZonedDevice`]: failed reads, writes, appends and
//! resets, zones going offline during a run, and slow completions, decided at random
//! with set probabilities.
//!
//! The emulated backends can be told to fail a given command ([`FaultInjector`]); this
//! wrapper makes failure a matter of chance, on every backend (a user's device file,
//! a zoned block device, an NVMe namespace), so a live pager meets the failures a
//! worn or failing drive produces without anyone scripting them.
//!
//! What it promises:
//! - An injected failure happens before the command reaches the device: a failed read
//!   fills nothing, a failed append writes nothing and moves no write pointer, a failed
//!   reset leaves the zone as it was (`ZoneError::Injected`).
//! - An offline zone exists only in the wrapper: the device underneath keeps its data
//!   (its zone is finished, so it holds no open or active resource the host no longer
//!   counts) and a later run on the bare device resets it as usual. Every command on
//!   an offline zone from then on fails with `ZoneError::ZoneOffline`, and reports
//!   show it Offline.
//! - Decisions are seeded and follow from the order of commands: the n-th command's
//!   fate is a hash of the seed and n, so one thread issuing the same commands sees
//!   the same faults run after run, and concurrent callers need no lock to decide.

use std::fmt;
use std::io::IoSlice;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::device::{DeviceCounters, FaultInjector, FaultKind, ZoneCounters, ZonedDevice};
use crate::error::{Result, ZoneError};
use crate::geometry::Geometry;
use crate::zone::{ZoneCondition, ZoneInfo, ZoneOp};

/// What `FaultSpec::from_str` accepts, quoted by every parse error.
pub const FAULT_SPEC_GRAMMAR: &str = "a fault spec is KEY=VALUE[,KEY=VALUE...] with the keys \
    read, write, append, reset, slow (the probability of that per command, from 0 to 1: \
    failed reads, writes, appends, resets, and completions delayed), \
    offline (zones taken offline during the run), \
    offline-after (mean commands before each of them, default 4096), \
    slow-us (longest delay of a slow completion in µs, default 1000), \
    seed (of every decision, default 1); e.g. read=0.01,append=0.01,offline=2";

const OFFLINE_AFTER_COMMANDS_DEFAULT: u64 = 4096;
const SLOW_US_MAX_DEFAULT: u64 = 1000;
/// A slow completion waits at most a second: longer looks like a hang, not a slow drive.
const SLOW_US_LIMIT: u64 = 1_000_000;

/// Which faults a [`FaultyDevice`] injects, and how often.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultSpec {
    /// Probabilities per command of that kind, 0 to 1.
    pub read_probability: f64,
    pub write_probability: f64,
    pub append_probability: f64,
    pub reset_probability: f64,
    /// Probability per command of any kind that its completion comes late.
    pub slow_probability: f64,
    /// A slow completion waits 1 to this many µs.
    pub slow_us_max: u64,
    /// Zones taken offline during the run, one after another.
    pub offline_zones: u32,
    /// Mean commands before each zone goes offline (counted from the last one).
    pub offline_after_commands: u64,
    pub seed: u64,
}

impl Default for FaultSpec {
    /// No faults at all.
    fn default() -> FaultSpec {
        FaultSpec {
            read_probability: 0.0,
            write_probability: 0.0,
            append_probability: 0.0,
            reset_probability: 0.0,
            slow_probability: 0.0,
            slow_us_max: SLOW_US_MAX_DEFAULT,
            offline_zones: 0,
            offline_after_commands: OFFLINE_AFTER_COMMANDS_DEFAULT,
            seed: 1,
        }
    }
}

/// Why a fault spec was refused; each message ends with [`FAULT_SPEC_GRAMMAR`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FaultSpecError {
    #[error("fault spec entry {entry:?} has no value; {}", FAULT_SPEC_GRAMMAR)]
    MissingValue { entry: String },
    #[error("unknown fault spec key {key:?}; {}", FAULT_SPEC_GRAMMAR)]
    UnknownKey { key: String },
    #[error("fault spec key {key} is given twice; {}", FAULT_SPEC_GRAMMAR)]
    Repeated { key: String },
    #[error("fault spec key {key} has the bad value {value:?} ({expected}); {}", FAULT_SPEC_GRAMMAR)]
    BadValue { key: String, value: String, expected: &'static str },
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(text: &str) -> std::result::Result<FaultSpec, FaultSpecError> {
        let mut spec = FaultSpec::default();
        let mut seen: Vec<&str> = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|entry| !entry.is_empty()) {
            let Some((key, value)) = entry.split_once('=') else {
                return Err(FaultSpecError::MissingValue { entry: entry.to_string() });
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(FaultSpecError::Repeated { key: key.to_string() });
            }
            let bad = |expected: &'static str| FaultSpecError::BadValue {
                key: key.to_string(),
                value: value.to_string(),
                expected,
            };
            let probability = || {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| bad("a probability per command, from 0 to 1"))
            };
            match key {
                "read" => spec.read_probability = probability()?,
                "write" => spec.write_probability = probability()?,
                "append" => spec.append_probability = probability()?,
                "reset" => spec.reset_probability = probability()?,
                "slow" => spec.slow_probability = probability()?,
                "slow-us" => {
                    spec.slow_us_max = value
                        .parse()
                        .ok()
                        .filter(|us| (1..=SLOW_US_LIMIT).contains(us))
                        .ok_or_else(|| bad("microseconds, from 1 to 1000000"))?
                }
                "offline" => spec.offline_zones = value.parse().map_err(|_| bad("a number of zones"))?,
                "offline-after" => {
                    spec.offline_after_commands = value
                        .parse()
                        .ok()
                        .filter(|&commands| commands >= 1)
                        .ok_or_else(|| bad("a number of commands, at least 1"))?
                }
                "seed" => spec.seed = value.parse().map_err(|_| bad("an unsigned 64-bit integer"))?,
                _ => return Err(FaultSpecError::UnknownKey { key: key.to_string() }),
            }
            seen.push(key);
        }
        Ok(spec)
    }
}

impl fmt::Display for FaultSpec {
    /// Every key, in the grammar's order: parsing the text gives the same spec back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "read={},write={},append={},reset={},slow={},offline={},offline-after={},slow-us={},seed={}",
            self.read_probability,
            self.write_probability,
            self.append_probability,
            self.reset_probability,
            self.slow_probability,
            self.offline_zones,
            self.offline_after_commands,
            self.slow_us_max,
            self.seed
        )
    }
}

/// What a [`FaultyDevice`] injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InjectedFaults {
    /// Commands the wrapper saw (reads, writes, appends, zone operations).
    pub commands: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    pub append_errors: u64,
    pub reset_errors: u64,
    /// Zones taken offline.
    pub zones_offline: u64,
    /// Commands failed because their zone was offline.
    pub offline_zone_errors: u64,
    /// Completions delayed, and their total delay.
    pub slow_completions: u64,
    pub slow_us_total: u64,
}

impl InjectedFaults {
    /// Commands that failed on purpose (offline zones included).
    pub fn errors(&self) -> u64 {
        self.read_errors + self.write_errors + self.append_errors + self.reset_errors + self.offline_zone_errors
    }
}

#[derive(Default)]
struct InjectedCells {
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    append_errors: AtomicU64,
    reset_errors: AtomicU64,
    zones_offline: AtomicU64,
    offline_zone_errors: AtomicU64,
    slow_completions: AtomicU64,
    slow_us_total: AtomicU64,
}

/// A command as the wrapper sorts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Command {
    Read,
    Write,
    Append,
    ZoneOp(ZoneOp),
}

impl Command {
    /// The kind of failure this command may be picked for, if any.
    fn fault_kind(self) -> Option<FaultKind> {
        match self {
            Command::Read => Some(FaultKind::Read),
            Command::Write => Some(FaultKind::Write),
            Command::Append => Some(FaultKind::Append),
            Command::ZoneOp(ZoneOp::Reset) => Some(FaultKind::Reset),
            Command::ZoneOp(_) => None,
        }
    }
}

fn fault_kind_index(kind: FaultKind) -> usize {
    match kind {
        FaultKind::Read => 0,
        FaultKind::Write => 1,
        FaultKind::Append => 2,
        FaultKind::Reset => 3,
    }
}

fn fault_kind_op(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Read => "read",
        FaultKind::Write => "write",
        FaultKind::Append => "append",
        FaultKind::Reset => "reset",
    }
}

/// Independent random streams drawn from one seed and command number.
const STREAM_FAIL: u64 = 1;
const STREAM_SLOW: u64 = 2;
const STREAM_SLOW_DELAY: u64 = 3;
const STREAM_OFFLINE_GAP: u64 = 4;
const STREAM_OFFLINE_ZONE: u64 = 5;

/// splitmix64's finalizer: a bijection whose outputs for neighbouring inputs look
/// unrelated.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A random 64-bit draw for command `index` in `stream`.
fn draw(seed: u64, index: u64, stream: u64) -> u64 {
    mix(mix(seed ^ 0x9E37_79B9_7F4A_7C15) ^ mix(index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream))
}

/// A draw as a number in [0, 1).
fn unit(draw: u64) -> f64 {
    (draw >> 11) as f64 / (1u64 << 53) as f64
}

/// Zone failure codes kept per zone (0: healthy).
const HEALTHY: u8 = 0;

/// A [`ZonedDevice`] that fails, delays and takes zones offline at random, per a
/// [`FaultSpec`]; otherwise it forwards every command to the device it wraps.
pub struct FaultyDevice {
    inner: Arc<dyn ZonedDevice>,
    spec: FaultSpec,
    /// Commands seen: the next command's number.
    commands: AtomicU64,
    /// Per zone: `HEALTHY`, or the code of the condition the wrapper failed it to.
    failed: Box<[AtomicU8]>,
    /// The command numbers from which each zone failure is due, ascending.
    offline_due: Box<[u64]>,
    /// Zone failures done so far (an index into `offline_due`).
    offline_done: AtomicUsize,
    /// Held while a zone is taken offline, so two commands never take the same turn.
    offline_turn: Mutex<()>,
    /// Failures asked for through [`FaultInjector::fail_next`], by fault kind.
    fail_next: [AtomicU32; 4],
    injected: InjectedCells,
}

impl FaultyDevice {
    pub fn new(inner: Arc<dyn ZonedDevice>, spec: FaultSpec) -> FaultyDevice {
        let zone_count = inner.geometry().zone_count;
        let mut due = 0u64;
        let offline_due = (0..spec.offline_zones as u64)
            .map(|turn| {
                // Uniform in 1..2*mean: the turns spread over the run, about `mean` apart.
                let span = (2 * spec.offline_after_commands).saturating_sub(1).max(1);
                due += 1 + draw(spec.seed, turn, STREAM_OFFLINE_GAP) % span;
                due
            })
            .collect();
        FaultyDevice {
            inner,
            spec,
            commands: AtomicU64::new(0),
            failed: (0..zone_count).map(|_| AtomicU8::new(HEALTHY)).collect(),
            offline_due,
            offline_done: AtomicUsize::new(0),
            offline_turn: Mutex::new(()),
            fail_next: Default::default(),
            injected: InjectedCells::default(),
        }
    }

    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    /// The device underneath, without faults.
    pub fn inner(&self) -> &Arc<dyn ZonedDevice> {
        &self.inner
    }

    /// What was injected so far.
    pub fn injected(&self) -> InjectedFaults {
        let cells = &self.injected;
        InjectedFaults {
            commands: self.commands.load(Relaxed),
            read_errors: cells.read_errors.load(Relaxed),
            write_errors: cells.write_errors.load(Relaxed),
            append_errors: cells.append_errors.load(Relaxed),
            reset_errors: cells.reset_errors.load(Relaxed),
            zones_offline: cells.zones_offline.load(Relaxed),
            offline_zone_errors: cells.offline_zone_errors.load(Relaxed),
            slow_completions: cells.slow_completions.load(Relaxed),
            slow_us_total: cells.slow_us_total.load(Relaxed),
        }
    }

    /// Zones the wrapper took offline or made read-only, with their condition.
    pub fn failed_zones(&self) -> Vec<(u32, ZoneCondition)> {
        self.failed
            .iter()
            .enumerate()
            .filter_map(|(zone, code)| {
                ZoneCondition::from_code(code.load(SeqCst)).map(|condition| (zone as u32, condition))
            })
            .collect()
    }

    fn failure(&self, zone: u32) -> Option<ZoneCondition> {
        self.failed.get(zone as usize).and_then(|code| ZoneCondition::from_code(code.load(SeqCst)))
    }

    /// Fails `zone` as `condition` (Offline or Read-Only) in the wrapper, and finishes
    /// it underneath if it is active there: the host stops counting a failed zone
    /// against the open and active limits, so the device must not either.
    fn fail(&self, zone: u32, condition: ZoneCondition) {
        assert!(
            matches!(condition, ZoneCondition::Offline | ZoneCondition::ReadOnly),
            "zones fail as offline or read-only"
        );
        let Some(code) = self.failed.get(zone as usize) else { return };
        if code.load(SeqCst) == ZoneCondition::Offline.code() {
            return;
        }
        code.store(condition.code(), SeqCst);
        if self.inner.report_zone(zone).is_ok_and(|info| info.condition.is_active()) {
            // An append admitted before the failure may still be running: it lands or
            // fails (and then reports the zone offline), either way harmless.
            let _ = self.inner.finish(zone);
        }
    }

    /// Takes the next zone offline once its turn is due: a zone holding data, picked
    /// at random, so pages are lost. With no such zone yet the turn waits for a later
    /// command.
    fn take_zone_offline_if_due(&self, index: u64) {
        let due = |done: usize| self.offline_due.get(done).is_some_and(|&due| index >= due);
        if !due(self.offline_done.load(SeqCst)) {
            return;
        }
        let _turn = self.offline_turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let done = self.offline_done.load(SeqCst);
        if !due(done) {
            return;
        }
        let Ok(zones) = self.inner.report_zones() else { return };
        let candidates: Vec<u32> = zones
            .iter()
            .filter(|info| {
                info.written_lbas() > 0
                    && !matches!(info.condition, ZoneCondition::Offline | ZoneCondition::ReadOnly)
                    && self.failure(info.zone).is_none()
            })
            .map(|info| info.zone)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let zone =
            candidates[(draw(self.spec.seed, done as u64, STREAM_OFFLINE_ZONE) % candidates.len() as u64) as usize];
        self.fail(zone, ZoneCondition::Offline);
        self.injected.zones_offline.fetch_add(1, Relaxed);
        self.offline_done.store(done + 1, SeqCst);
    }

    /// Decides a command's fate before it runs: an error to return instead of running
    /// it, or how long its completion is delayed (0: not at all).
    fn admit(&self, command: Command, zone: Option<u32>) -> Result<u64> {
        let index = self.commands.fetch_add(1, Relaxed);
        self.take_zone_offline_if_due(index);
        // Commands naming no zone of the device go through: the device names the mistake.
        let Some(zone) = zone.filter(|&zone| zone < self.inner.geometry().zone_count) else {
            return Ok(0);
        };
        match self.failure(zone) {
            Some(ZoneCondition::Offline) => {
                self.injected.offline_zone_errors.fetch_add(1, Relaxed);
                return Err(ZoneError::ZoneOffline { zone });
            }
            Some(_) if command != Command::Read => return Err(ZoneError::ZoneReadOnly { zone }),
            _ => {}
        }
        if let Some(kind) = command.fault_kind() {
            let probability = match kind {
                FaultKind::Read => self.spec.read_probability,
                FaultKind::Write => self.spec.write_probability,
                FaultKind::Append => self.spec.append_probability,
                FaultKind::Reset => self.spec.reset_probability,
            };
            let asked =
                self.fail_next[fault_kind_index(kind)].fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1)).is_ok();
            if asked || probability > 0.0 && unit(draw(self.spec.seed, index, STREAM_FAIL)) < probability {
                let cell = match kind {
                    FaultKind::Read => &self.injected.read_errors,
                    FaultKind::Write => &self.injected.write_errors,
                    FaultKind::Append => &self.injected.append_errors,
                    FaultKind::Reset => &self.injected.reset_errors,
                };
                cell.fetch_add(1, Relaxed);
                return Err(ZoneError::Injected { op: fault_kind_op(kind), zone });
            }
        }
        let slow = self.spec.slow_probability > 0.0
            && unit(draw(self.spec.seed, index, STREAM_SLOW)) < self.spec.slow_probability;
        Ok(if slow { 1 + draw(self.spec.seed, index, STREAM_SLOW_DELAY) % self.spec.slow_us_max } else { 0 })
    }

    /// Completes a command run on the device: late if it was picked to be slow, and an
    /// error from a zone that went offline meanwhile is that zone's being offline.
    fn complete<T>(&self, result: Result<T>, zone: Option<u32>, delay_us: u64) -> Result<T> {
        if delay_us > 0 {
            std::thread::sleep(Duration::from_micros(delay_us));
            self.injected.slow_completions.fetch_add(1, Relaxed);
            self.injected.slow_us_total.fetch_add(delay_us, Relaxed);
        }
        match (result, zone) {
            (Err(_), Some(zone)) if self.failure(zone) == Some(ZoneCondition::Offline) => {
                Err(ZoneError::ZoneOffline { zone })
            }
            (result, _) => result,
        }
    }

    fn run<T>(&self, command: Command, zone: Option<u32>, execute: impl FnOnce() -> Result<T>) -> Result<T> {
        let delay_us = self.admit(command, zone)?;
        self.complete(execute(), zone, delay_us)
    }
}

impl ZonedDevice for FaultyDevice {
    fn geometry(&self) -> &Geometry {
        self.inner.geometry()
    }

    fn report_zone(&self, zone: u32) -> Result<ZoneInfo> {
        let info = self.inner.report_zone(zone)?;
        Ok(match self.failure(zone) {
            // As Linux reports an offline zone: the write pointer at the zone's end.
            Some(ZoneCondition::Offline) => ZoneInfo {
                condition: ZoneCondition::Offline,
                write_pointer_lba: info.start_lba + info.len_lbas,
                ..info
            },
            Some(condition) => ZoneInfo { condition, ..info },
            None => info,
        })
    }

    fn report_zones(&self) -> Result<Vec<ZoneInfo>> {
        let zones = self.inner.report_zones()?;
        zones
            .into_iter()
            .map(|info| match self.failure(info.zone) {
                None => Ok(info),
                Some(_) => self.report_zone(info.zone),
            })
            .collect()
    }

    fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>) -> Result<()> {
        let zone = self.inner.geometry().zone_of(lba);
        self.run(Command::Read, zone, || self.inner.read(lba, data, metadata))
    }

    fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()> {
        let zone = self.inner.geometry().zone_of(lba);
        self.run(Command::Write, zone, || self.inner.write(lba, data, metadata))
    }

    fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64> {
        self.run(Command::Append, Some(zone), || self.inner.append(zone, data, metadata))
    }

    fn append_vectored(&self, zone: u32, data: &[IoSlice<'_>], metadata: Option<&[u8]>) -> Result<u64> {
        self.run(Command::Append, Some(zone), || self.inner.append_vectored(zone, data, metadata))
    }

    fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()> {
        self.run(Command::ZoneOp(op), Some(zone), || self.inner.zone_op(zone, op))
    }

    fn sync(&self) -> Result<()> {
        self.inner.sync()
    }

    fn counters(&self) -> DeviceCounters {
        self.inner.counters()
    }

    fn zone_counters(&self, zone: u32) -> Result<ZoneCounters> {
        self.inner.zone_counters(zone)
    }

    fn counters_persist(&self) -> bool {
        self.inner.counters_persist()
    }

    fn save_counters(&self) {
        self.inner.save_counters()
    }

    /// The wrapper's own injector: zones failed and failures asked for live in the
    /// wrapper, never on the device underneath.
    fn fault_injector(&self) -> Option<&dyn FaultInjector> {
        Some(self)
    }

    fn describe(&self) -> String {
        format!("{} with injected faults ({})", self.inner.describe(), self.spec)
    }
}

impl FaultInjector for FaultyDevice {
    fn fail_zone(&self, zone: u32, condition: ZoneCondition) {
        self.fail(zone, condition);
    }

    fn fail_next(&self, kind: FaultKind, count: u32) {
        self.fail_next[fault_kind_index(kind)].store(count, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemDevice;

    fn geometry() -> Geometry {
        Geometry::from_bytes(4096, 16, 8, 1 << 20, 1 << 20, 4, 4, 4096).unwrap()
    }

    fn faulty(spec: &str) -> FaultyDevice {
        FaultyDevice::new(Arc::new(MemDevice::new(geometry()).unwrap()), spec.parse().unwrap())
    }

    #[test]
    fn specs_parse_and_print_back() {
        let spec: FaultSpec =
            "read=0.01, append=0.5,offline=2,slow=0.1,slow-us=250,reset=1,seed=9,offline-after=10".parse().unwrap();
        assert_eq!(spec.read_probability, 0.01);
        assert_eq!(spec.append_probability, 0.5);
        assert_eq!(spec.reset_probability, 1.0);
        assert_eq!(spec.write_probability, 0.0);
        assert_eq!((spec.offline_zones, spec.offline_after_commands), (2, 10));
        assert_eq!((spec.slow_probability, spec.slow_us_max, spec.seed), (0.1, 250, 9));
        assert_eq!(spec.to_string().parse::<FaultSpec>().unwrap(), spec);
        assert_eq!("".parse::<FaultSpec>().unwrap(), FaultSpec::default());
    }

    #[test]
    fn bad_specs_name_the_key_the_value_and_the_grammar() {
        let cases: [(&str, &str); 8] = [
            ("read=1.5", "\"1.5\""),
            ("read=-0.1", "read"),
            ("raed=0.1", "\"raed\""),
            ("offline", "\"offline\""),
            ("offline=two", "\"two\""),
            ("slow-us=0", "slow-us"),
            ("read=0.1,read=0.2", "twice"),
            ("append=NaN", "append"),
        ];
        for (text, named) in cases {
            let error = text.parse::<FaultSpec>().expect_err(text).to_string();
            assert!(error.contains(named), "{text}: {error}");
            assert!(error.contains("KEY=VALUE") && error.contains("offline-after"), "{text}: {error}");
        }
    }

    #[test]
    fn a_spec_without_faults_changes_nothing() {
        let device = faulty("");
        let data = vec![7u8; 8192];
        assert_eq!(device.append(1, &data, None).unwrap(), geometry().zone_start_lba(1));
        let mut back = vec![0u8; 8192];
        device.read(geometry().zone_start_lba(1), &mut back, None).unwrap();
        assert_eq!(back, data);
        device.reset(1).unwrap();
        assert_eq!(device.injected(), InjectedFaults { commands: 3, ..InjectedFaults::default() });
    }

    #[test]
    fn injected_errors_change_nothing_on_the_device() {
        let device = faulty("read=1,append=1,reset=1,write=1");
        let inner = device.inner().clone();
        inner.append(0, &[1u8; 4096], None).unwrap();
        let before = inner.report_zones().unwrap();
        let counters = inner.counters();
        assert!(matches!(device.append(0, &[2u8; 4096], None), Err(ZoneError::Injected { op: "append", zone: 0 })));
        assert!(matches!(
            device.append_vectored(0, &[IoSlice::new(&[2u8; 4096])], None),
            Err(ZoneError::Injected { op: "append", zone: 0 })
        ));
        assert!(matches!(device.write(1, &[2u8; 4096], None), Err(ZoneError::Injected { op: "write", zone: 0 })));
        assert!(matches!(device.reset(0), Err(ZoneError::Injected { op: "reset", zone: 0 })));
        let mut back = [9u8; 4096];
        assert!(matches!(device.read(0, &mut back, None), Err(ZoneError::Injected { op: "read", zone: 0 })));
        assert_eq!(back, [9u8; 4096], "a failed read fills nothing");
        assert_eq!(inner.report_zones().unwrap(), before);
        assert_eq!(inner.counters(), counters);
        let injected = device.injected();
        assert_eq!(
            (injected.read_errors, injected.write_errors, injected.append_errors, injected.reset_errors),
            (1, 1, 2, 1)
        );
        assert_eq!(injected.errors(), 5);
        // Commands naming no zone still get the device's own error.
        assert!(matches!(device.append(99, &[0u8; 4096], None), Err(ZoneError::InvalidZone { .. })));
        // Finish, open and close are never picked.
        device.finish(0).unwrap();
    }

    #[test]
    fn failures_follow_their_probability_and_the_seed() {
        let outcomes = |spec: &str| {
            let device = faulty(spec);
            device.inner().append(0, &[1u8; 4096], None).unwrap();
            let mut page = [0u8; 4096];
            (0..4000).map(|_| device.read(0, &mut page, None).is_err()).collect::<Vec<bool>>()
        };
        let first = outcomes("read=0.1,seed=3");
        let failed = first.iter().filter(|&&failed| failed).count();
        assert!((300..500).contains(&failed), "{failed} of 4000 reads failed at p = 0.1");
        assert_eq!(outcomes("read=0.1,seed=3"), first, "the same seed and order, the same faults");
        assert_ne!(outcomes("read=0.1,seed=4"), first, "another seed, other faults");
        assert!(outcomes("read=0").iter().all(|&failed| !failed));
    }

    #[test]
    fn zones_go_offline_one_by_one_and_fail_every_later_command() {
        let device = faulty("offline=2,offline-after=20,seed=5");
        let inner = device.inner().clone();
        // Three zones with data; zone 3 stays open underneath.
        for zone in 0..4 {
            device.append(zone, &[zone as u8 + 1; 4096], None).unwrap();
        }
        let mut page = [0u8; 4096];
        for _ in 0..200 {
            let _ = device.read(0, &mut page, None);
        }
        let failed = device.failed_zones();
        assert_eq!(failed.len(), 2, "{failed:?}");
        assert_eq!(device.injected().zones_offline, 2);
        for &(zone, condition) in &failed {
            assert_eq!(condition, ZoneCondition::Offline);
            let start = geometry().zone_start_lba(zone);
            assert!(matches!(device.read(start, &mut page, None), Err(ZoneError::ZoneOffline { .. })));
            assert!(matches!(device.append(zone, &page, None), Err(ZoneError::ZoneOffline { .. })));
            assert!(matches!(device.reset(zone), Err(ZoneError::ZoneOffline { .. })));
            let report = device.report_zone(zone).unwrap();
            assert_eq!(report.condition, ZoneCondition::Offline);
            assert_eq!(device.report_zones().unwrap()[zone as usize], report);
            // Underneath the zone keeps its data and holds no open or active resource.
            let below = inner.report_zone(zone).unwrap();
            assert!(!below.condition.is_active() && below.condition != ZoneCondition::Offline, "{below:?}");
            inner.read(start, &mut page, None).unwrap();
            assert_eq!(page, [zone as u8 + 1; 4096]);
        }
        assert!(device.injected().offline_zone_errors >= 6);
        // Never more than asked for, and the healthy zones work on.
        for _ in 0..200 {
            let _ = device.read(0, &mut page, None);
        }
        assert_eq!(device.failed_zones(), failed);
        let healthy = (0..4).find(|zone| failed.iter().all(|&(failed, _)| failed != *zone)).unwrap();
        device.append(healthy, &page, None).unwrap();
        device.reset_all().unwrap();
        // The same seed and commands take the same zones offline.
        let again = faulty("offline=2,offline-after=20,seed=5");
        for zone in 0..4 {
            again.append(zone, &[1; 4096], None).unwrap();
        }
        for _ in 0..200 {
            let _ = again.read(0, &mut page, None);
        }
        assert_eq!(again.failed_zones(), failed);
    }

    #[test]
    fn an_offline_turn_waits_for_a_zone_with_data() {
        let device = faulty("offline=1,offline-after=1");
        let mut page = [0u8; 4096];
        for _ in 0..10 {
            device.read(0, &mut page, None).unwrap();
        }
        assert!(device.failed_zones().is_empty(), "empty zones hold nothing to lose");
        device.append(6, &page, None).unwrap();
        let _ = device.read(0, &mut page, None);
        assert_eq!(device.failed_zones(), vec![(6, ZoneCondition::Offline)]);
    }

    #[test]
    fn slow_completions_are_late_and_counted() {
        let device = faulty("slow=1,slow-us=2000");
        let started = std::time::Instant::now();
        device.append(0, &[1u8; 4096], None).unwrap();
        let mut page = [0u8; 4096];
        device.read(0, &mut page, None).unwrap();
        assert_eq!(page, [1u8; 4096]);
        let injected = device.injected();
        assert_eq!(injected.slow_completions, 2);
        assert!((2..=4000).contains(&injected.slow_us_total), "{injected:?}");
        assert!(started.elapsed() >= Duration::from_micros(injected.slow_us_total));
        assert_eq!(injected.errors(), 0);
    }

    #[test]
    fn the_injector_fails_zones_and_commands_in_the_wrapper_only() {
        let device = faulty("");
        let injector = device.fault_injector().expect("the wrapper injects");
        device.append(2, &[3u8; 4096], None).unwrap();
        injector.fail_zone(2, ZoneCondition::ReadOnly);
        assert_eq!(device.report_zone(2).unwrap().condition, ZoneCondition::ReadOnly);
        let mut page = [0u8; 4096];
        device.read(geometry().zone_start_lba(2), &mut page, None).unwrap();
        assert_eq!(page, [3u8; 4096]);
        assert!(matches!(device.append(2, &page, None), Err(ZoneError::ZoneReadOnly { zone: 2 })));
        assert!(matches!(device.reset(2), Err(ZoneError::ZoneReadOnly { zone: 2 })));
        assert_eq!(device.inner().report_zone(2).unwrap().condition, ZoneCondition::Full);
        injector.fail_next(FaultKind::Append, 2);
        assert!(device.append(0, &page, None).is_err() && device.append(0, &page, None).is_err());
        device.append(0, &page, None).unwrap();
    }

    #[test]
    fn concurrent_commands_see_each_decision_once() {
        let device = faulty("append=0.25,seed=11");
        let zone_lbas = geometry().zone_capacity_lbas;
        let appended = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for thread in 0..4u32 {
                let (device, appended) = (&device, &appended);
                scope.spawn(move || {
                    for _ in 0..60 {
                        if device.append(thread, &[thread as u8; 4096], None).is_ok() {
                            appended.fetch_add(1, Relaxed);
                        }
                    }
                });
            }
        });
        let injected = device.injected();
        assert_eq!(injected.commands, 240);
        assert_eq!(injected.append_errors + appended.load(Relaxed), 240);
        let written: u64 = device.report_zones().unwrap()[..4].iter().map(ZoneInfo::written_lbas).sum();
        assert_eq!(written, appended.load(Relaxed));
        assert!(written < 4 * zone_lbas);
    }
}
