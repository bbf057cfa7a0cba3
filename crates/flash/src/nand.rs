//! The NAND array both devices share: channels, dies, and what each operation costs.
//!
//! Die `d` sits on channel `d % channels`, so consecutive program units of a stripe
//! alternate channels. A read holds its die for tR plus the transfer (no cache read) and
//! its channel for the transfer; a program moves the data over the channel into the die's
//! cache register just before the die is free, then holds the die for tPROG (cache
//! program); an erase holds the die for tBERS.
//!
//! Every operation takes the earliest gap on its resources that fits, even one before
//! work reserved earlier: work waiting for its data (a program behind its GC reads) does
//! not hold up the die, as a controller with per-die queues would not let it. Erases
//! queue behind everything reserved on their die, so nothing reads an erased block.

use serde::{Deserialize, Serialize};
use znswap_core::PAGE_BYTES;

use crate::timeline::Timeline;
use crate::Ns;

/// A NAND configuration that cannot work: each names the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NandConfigError {
    #[error("nand: {channels} channels × {dies_per_channel} dies per channel; both must be at least 1")]
    NoDies { channels: u32, dies_per_channel: u32 },
    #[error("nand: program_unit_bytes = {program_unit_bytes} must be a non-zero multiple of {page_bytes} B", page_bytes = PAGE_BYTES)]
    ProgramUnit { program_unit_bytes: u32 },
    #[error("nand: t_read_ns, t_prog_ns and t_erase_ns must all be non-zero")]
    ZeroLatency,
    #[error("nand: channel_mib_s must be non-zero")]
    ZeroChannelBandwidth,
    #[error("nand: write_buffer_bytes = {write_buffer_bytes} must hold at least two program units ({needed_bytes} B)")]
    WriteBuffer { write_buffer_bytes: u64, needed_bytes: u64 },
}

/// NAND geometry and timing. `Default` is the drive class of the WD ZN540 / SN540:
/// 8 channels × 4 dies, 16 KiB pages programmed two planes at a time (32 KiB), tR 75 µs,
/// tPROG 1 ms, tBERS 3.5 ms for a 33.7 MiB block, 410 MiB/s channels, a 4 MiB write buffer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NandConfig {
    pub channels: u32,
    pub dies_per_channel: u32,
    /// Bytes one program operation writes on one die (all planes).
    pub program_unit_bytes: u32,
    /// Array read time (tR) of one (multi-plane) page read.
    pub t_read_ns: Ns,
    /// Program time (tPROG) of one program unit.
    pub t_prog_ns: Ns,
    /// Block erase time (tBERS) of a full-size erase block.
    pub t_erase_ns: Ns,
    /// Bytes of a full-size erase block on one die. A scaled-down device (smaller blocks)
    /// is charged `t_erase_ns × block / erase_block_bytes`, so erasing costs the same
    /// share of the die's time as on the real drive; 0 charges the full tBERS always.
    pub erase_block_bytes: u64,
    /// Bandwidth of one channel (ONFI/Toggle bus).
    pub channel_mib_s: u32,
    /// Device write buffer: a write completes once its data is here.
    pub write_buffer_bytes: u64,
    /// Controller and host-link latency added to every completion (not a shared resource).
    pub t_command_ns: Ns,
}

impl Default for NandConfig {
    fn default() -> NandConfig {
        NandConfig {
            channels: 8,
            dies_per_channel: 4,
            program_unit_bytes: 32 << 10,
            t_read_ns: 75_000,
            t_prog_ns: 1_000_000,
            t_erase_ns: 3_500_000,
            // A ZN540 zone (1077 MiB) is one block on each of the 32 dies.
            erase_block_bytes: (1077 << 20) / 32,
            channel_mib_s: 410,
            write_buffer_bytes: 4 << 20,
            t_command_ns: 2_000,
        }
    }
}

impl NandConfig {
    pub fn dies(&self) -> u32 {
        self.channels * self.dies_per_channel
    }

    pub fn program_unit_pages(&self) -> u32 {
        self.program_unit_bytes / PAGE_BYTES as u32
    }

    /// Pages of one program unit on every die: the smallest fully striped extent.
    pub fn stripe_pages(&self) -> u32 {
        self.program_unit_pages() * self.dies()
    }

    /// Channel time to move `bytes` (rounded up to whole nanoseconds).
    pub fn transfer_ns(&self, bytes: u64) -> Ns {
        let bytes_per_s = self.channel_mib_s as u128 * (1 << 20);
        (bytes as u128 * 1_000_000_000).div_ceil(bytes_per_s) as Ns
    }

    /// Erase time of a block holding `block_bytes` on one die (see `erase_block_bytes`).
    pub fn erase_ns(&self, block_bytes: u64) -> Ns {
        if self.erase_block_bytes == 0 || block_bytes >= self.erase_block_bytes {
            return self.t_erase_ns;
        }
        let scaled = self.t_erase_ns as u128 * block_bytes as u128 / self.erase_block_bytes as u128;
        (scaled as Ns).max(1)
    }

    /// Checks every field; the error names the field and the fix.
    pub fn validate(&self) -> Result<(), NandConfigError> {
        if self.channels == 0 || self.dies_per_channel == 0 {
            return Err(NandConfigError::NoDies { channels: self.channels, dies_per_channel: self.dies_per_channel });
        }
        if self.program_unit_bytes == 0 || self.program_unit_bytes % PAGE_BYTES as u32 != 0 {
            return Err(NandConfigError::ProgramUnit { program_unit_bytes: self.program_unit_bytes });
        }
        if self.t_read_ns == 0 || self.t_prog_ns == 0 || self.t_erase_ns == 0 {
            return Err(NandConfigError::ZeroLatency);
        }
        if self.channel_mib_s == 0 {
            return Err(NandConfigError::ZeroChannelBandwidth);
        }
        if self.write_buffer_bytes < 2 * self.program_unit_bytes as u64 {
            return Err(NandConfigError::WriteBuffer {
                write_buffer_bytes: self.write_buffer_bytes,
                needed_bytes: 2 * self.program_unit_bytes as u64,
            });
        }
        Ok(())
    }
}

/// The dies and channels of one device as resource timelines.
#[derive(Clone, Debug)]
pub(crate) struct Nand {
    pub config: NandConfig,
    dies: Vec<Timeline>,
    channels: Vec<Timeline>,
    transfer_page_ns: Ns,
    /// No command starts before this: reservations ending by then are dropped lazily.
    horizon: Ns,
    /// End of the latest reservation on any die or channel.
    latest_end: Ns,
    /// Die time reserved so far, summed over dies (utilization = this / dies / elapsed).
    die_busy_ns: Ns,
}

impl Nand {
    pub fn new(config: NandConfig) -> Nand {
        Nand {
            config,
            dies: vec![Timeline::default(); config.dies() as usize],
            channels: vec![Timeline::default(); config.channels as usize],
            transfer_page_ns: config.transfer_ns(PAGE_BYTES as u64),
            horizon: 0,
            latest_end: 0,
            die_busy_ns: 0,
        }
    }

    pub fn die_count(&self) -> u32 {
        self.dies.len() as u32
    }

    /// Promises that no later command starts before `now`; each timeline forgets the
    /// reservations that ended by then the next time it is used.
    pub fn prune(&mut self, now: Ns) {
        debug_assert!(now >= self.horizon, "time ran backwards");
        self.horizon = now;
    }

    fn die(&mut self, die: u32) -> &mut Timeline {
        let timeline = &mut self.dies[die as usize];
        timeline.prune(self.horizon);
        timeline
    }

    fn channel_of(&mut self, die: u32) -> &mut Timeline {
        let timeline = &mut self.channels[(die % self.config.channels) as usize];
        timeline.prune(self.horizon);
        timeline
    }

    /// Reads `pages` pages of one program unit on `die` (one multi-plane array read),
    /// starting no earlier than `earliest`. Returns when the data is at the controller.
    pub fn read(&mut self, earliest: Ns, die: u32, pages: u32) -> Ns {
        debug_assert!(pages >= 1 && pages <= self.config.program_unit_pages());
        let transfer = self.transfer_page_ns * pages as Ns;
        let t_read = self.config.t_read_ns;
        let die_start = self.die(die).take(earliest, t_read + transfer);
        self.die_busy_ns += t_read + transfer;
        let transfer_start = self.channel_of(die).take(die_start + t_read, transfer);
        self.ended(die_start + t_read + transfer);
        self.ended(transfer_start + transfer)
    }

    /// Notes a reservation ending at `end`; returns it.
    fn ended(&mut self, end: Ns) -> Ns {
        self.latest_end = self.latest_end.max(end);
        end
    }

    /// Programs `pages` pages (one program unit, possibly partial) on `die`, with the data
    /// at the controller from `ready` and the block writable from `block_ready`.
    /// Returns when the program ends (and the data may leave the write buffer).
    pub fn program(&mut self, ready: Ns, block_ready: Ns, die: u32, pages: u32) -> Ns {
        debug_assert!(pages >= 1 && pages <= self.config.program_unit_pages());
        let transfer = self.transfer_page_ns * pages as Ns;
        let t_prog = self.config.t_prog_ns;
        // Fill the cache register just before the die frees up, not earlier: an early
        // transfer would hold the channel while nothing can use the data.
        let just_in_time = self.die(die).busy_until().saturating_sub(transfer);
        let transfer_start = self.channel_of(die).take(ready.max(just_in_time), transfer);
        let program_start = self.die(die).take((transfer_start + transfer).max(block_ready), t_prog);
        self.die_busy_ns += t_prog;
        self.ended(program_start + t_prog)
    }

    /// Erases one block of `block_bytes` on `die`, behind everything queued there.
    /// Returns when the erase ends.
    pub fn erase(&mut self, earliest: Ns, die: u32, block_bytes: u64) -> Ns {
        let t_erase = self.config.erase_ns(block_bytes);
        let timeline = self.die(die);
        let start = timeline.take(earliest.max(timeline.busy_until()), t_erase);
        self.die_busy_ns += t_erase;
        self.ended(start + t_erase)
    }

    pub fn die_busy_ns(&self) -> Ns {
        self.die_busy_ns
    }

    /// The time every die and channel is idle from (as far as reserved so far).
    pub fn busy_until(&self) -> Ns {
        self.latest_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_transfer_times() {
        let config = NandConfig::default();
        // 410 MiB/s: 4 KiB in 9.5 µs, 32 KiB in 76 µs.
        assert_eq!(config.transfer_ns(4096), 9_528);
        assert_eq!(config.transfer_ns(32 << 10), 76_220);
        assert_eq!(config.stripe_pages(), 256);
        assert_eq!(config.erase_ns(config.erase_block_bytes), 3_500_000);
        assert_eq!(config.erase_ns(config.erase_block_bytes / 4), 875_000, "a quarter-size block");
        assert_eq!(NandConfig { erase_block_bytes: 0, ..config }.erase_ns(4096), 3_500_000);
        config.validate().unwrap();
    }

    #[test]
    fn read_waits_behind_a_program_on_its_die_only() {
        let mut nand = Nand::new(NandConfig::default());
        let program_end = nand.program(0, 0, 0, 8);
        let busy = nand.read(0, 0, 1);
        let idle = nand.read(0, 1, 1);
        assert!(busy >= program_end, "read on the programming die ends at {busy}, program at {program_end}");
        assert_eq!(idle, 75_000 + 9_528, "read on an idle die is tR + one page transfer");
    }

    #[test]
    fn bad_config_names_the_field() {
        let config = NandConfig { program_unit_bytes: 5000, ..NandConfig::default() };
        assert!(matches!(config.validate(), Err(NandConfigError::ProgramUnit { program_unit_bytes: 5000 })));
    }
}
