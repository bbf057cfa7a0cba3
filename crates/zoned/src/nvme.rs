//! NVMe ZNS passthrough: a namespace's generic char device (`/dev/ngXnY`) driven with
//! io_uring `IORING_OP_URING_CMD` (`NVME_URING_CMD_IO`), as the ZNSwap paper does.
//!
//! Unlike the zoned block device, passthrough reaches what the block layer hides: Zone
//! Append with a **separate per-LBA metadata buffer** (ZNSwap's reverse-map records), the
//! LBA the device picked taken straight from the completion, and namespaces formatted
//! with extended LBAs (metadata interleaved with data), whose block device Linux hides.
//!
//! This module only issues raw commands ([`RawZoned`]); [`CheckedDevice`] validates
//! every command against its mirror of the zones first and resyncs after device errors.
//!
//! Design: the trait is synchronous and called from many threads, so each command takes
//! a ring from a pool (a new ring when all are busy), submits one command and waits for
//! its completion. Every buffer the kernel touches belongs to that ring's slot, so a
//! command that cannot be reaped (a wait error) leaks the slot rather than leaving the
//! kernel writing into freed memory. For queue depth later: let one submitter batch
//! commands from many callers into a shared ring and hand completions back by
//! `user_data`, and register the slot buffers as fixed buffers.
//!
//! QEMU before 9.0 loses metadata in DMA transfers over 512 B that are not a multiple of
//! 512 B; on such a controller (and only there) commands are cut so that never happens,
//! and appends to a zone are serialized so one that must be cut lands whole (see
//! `qemu_metadata_dma_bug`).
//!
//! [`CheckedDevice`]: crate::CheckedDevice

#![cfg(target_os = "linux")]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::checked::RawZoned;
use crate::error::{Result, ZoneError};
use crate::geometry::{Geometry, GeometryError, LBA_BYTES_ALLOWED, METADATA_BYTES_ALLOWED};
use crate::zone::{ZoneCondition, ZoneInfo, ZoneOp};

// ---------------------------------------------------------------------------------------
// Kernel ABI (include/uapi/linux/nvme_ioctl.h)

/// `struct nvme_uring_cmd`: the command carried in the 80-byte `cmd` area of a 128-byte
/// SQE. Its last word is reserved; the 64-bit result comes back in the 32-byte CQE.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmeUringCmd {
    pub opcode: u8,
    pub flags: u8,
    pub rsvd1: u16,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub metadata: u64,
    pub addr: u64,
    pub metadata_len: u32,
    pub data_len: u32,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
    pub timeout_ms: u32,
    pub rsvd2: u32,
}

/// `struct nvme_passthru_cmd` (a.k.a. `nvme_admin_cmd`): the same layout as
/// [`NvmeUringCmd`], with the command's 32-bit result written back in the last word.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct NvmePassthruCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

const NVME_CMD_BYTES: usize = 72;
// The kernel's ioctl numbers encode the struct size: a different size is a different ABI.
const _: () = assert!(std::mem::size_of::<NvmeUringCmd>() == NVME_CMD_BYTES);
const _: () = assert!(std::mem::size_of::<NvmePassthruCmd>() == NVME_CMD_BYTES);

/// `_IOC(dir, type, nr, size)` of asm-generic/ioctl.h (x86, arm64, riscv: 2 direction
/// bits at 30, 14 size bits at 16).
const fn ioc(dir: u32, kind: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((kind as u32) << 8) | nr as u32
}
const IOC_NONE: u32 = 0;
const IOC_READ_WRITE: u32 = 3;

/// `_IO('N', 0x40)`: the namespace id of an NVMe namespace device.
pub const NVME_IOCTL_ID: u32 = ioc(IOC_NONE, b'N', 0x40, 0);
/// `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
pub const NVME_IOCTL_ADMIN_CMD: u32 = ioc(IOC_READ_WRITE, b'N', 0x41, NVME_CMD_BYTES);
/// `_IOWR('N', 0x80, struct nvme_uring_cmd)`: the `cmd_op` of an I/O passthrough SQE.
pub const NVME_URING_CMD_IO: u32 = ioc(IOC_READ_WRITE, b'N', 0x80, NVME_CMD_BYTES);

impl NvmeUringCmd {
    /// The 80-byte `cmd` area of the SQE: the command, then zeroes.
    fn to_sqe_cmd(self) -> [u8; 80] {
        // SAFETY: NvmeUringCmd is repr(C) with only integer fields laid out without
        // padding (their sizes add up to the 72 bytes asserted above), so every byte of
        // it is initialized and any byte pattern is a valid [u8; 72].
        let bytes: [u8; NVME_CMD_BYTES] = unsafe { std::mem::transmute(self) };
        let mut cmd = [0u8; 80];
        cmd[..NVME_CMD_BYTES].copy_from_slice(&bytes);
        cmd
    }
}

// ---------------------------------------------------------------------------------------
// Command encoding (NVMe Base 2.0 and ZNS Command Set 1.1)

const OPC_FLUSH: u8 = 0x00;
const OPC_WRITE: u8 = 0x01;
const OPC_READ: u8 = 0x02;
const OPC_ZONE_MGMT_SEND: u8 = 0x79;
const OPC_ZONE_MGMT_RECV: u8 = 0x7A;
const OPC_ZONE_APPEND: u8 = 0x7D;
const OPC_ADMIN_IDENTIFY: u8 = 0x06;

const CNS_NAMESPACE: u8 = 0x00;
const CNS_CONTROLLER: u8 = 0x01;
const CNS_NS_DESCRIPTORS: u8 = 0x03;
const CNS_CSI_NAMESPACE: u8 = 0x05;
const CNS_CSI_CONTROLLER: u8 = 0x06;
/// Command Set Identifier of the Zoned Namespace command set.
pub const CSI_ZNS: u8 = 0x02;

/// Zone Send Action codes.
fn zone_send_action(op: ZoneOp) -> u8 {
    match op {
        ZoneOp::Close => 0x1,
        ZoneOp::Finish => 0x2,
        ZoneOp::Open => 0x3,
        ZoneOp::Reset => 0x4,
    }
}

/// An encoded command without its buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Command {
    pub opcode: u8,
    pub nsid: u32,
    /// CDW10 to CDW15.
    pub cdw: [u32; 6],
}

fn lba_words(lba: u64) -> (u32, u32) {
    (lba as u32, (lba >> 32) as u32)
}

impl Command {
    /// Read, Write or Zone Append of `len_lbas` (1..=65536) at `lba` (the zone start for
    /// an append). CDW12 holds NLB, 0-based; no FUA, no protection information.
    fn transfer(opcode: u8, nsid: u32, lba: u64, len_lbas: u64) -> Command {
        debug_assert!((1..=1 << 16).contains(&len_lbas));
        let (low, high) = lba_words(lba);
        Command { opcode, nsid, cdw: [low, high, (len_lbas - 1) as u32, 0, 0, 0] }
    }

    pub fn read(nsid: u32, lba: u64, len_lbas: u64) -> Command {
        Command::transfer(OPC_READ, nsid, lba, len_lbas)
    }

    pub fn write(nsid: u32, lba: u64, len_lbas: u64) -> Command {
        Command::transfer(OPC_WRITE, nsid, lba, len_lbas)
    }

    pub fn zone_append(nsid: u32, zone_start_lba: u64, len_lbas: u64) -> Command {
        Command::transfer(OPC_ZONE_APPEND, nsid, zone_start_lba, len_lbas)
    }

    /// Zone Management Send on one zone (Select All clear).
    pub fn zone_send(nsid: u32, zone_start_lba: u64, op: ZoneOp) -> Command {
        let (low, high) = lba_words(zone_start_lba);
        Command { opcode: OPC_ZONE_MGMT_SEND, nsid, cdw: [low, high, 0, zone_send_action(op) as u32, 0, 0] }
    }

    /// Zone Management Receive: Report Zones (ZRA 0) of all states (ZRASF 0) from the zone
    /// holding `lba`, Partial Report set so the header counts the descriptors returned.
    pub fn report_zones(nsid: u32, lba: u64, buffer_bytes: u32) -> Command {
        debug_assert!(buffer_bytes >= 128 && buffer_bytes % 4 == 0);
        let (low, high) = lba_words(lba);
        let dwords_minus_one = buffer_bytes / 4 - 1;
        Command { opcode: OPC_ZONE_MGMT_RECV, nsid, cdw: [low, high, dwords_minus_one, 1 << 16, 0, 0] }
    }

    pub fn flush(nsid: u32) -> Command {
        Command { opcode: OPC_FLUSH, nsid, cdw: [0; 6] }
    }

    /// Identify (admin): CNS in CDW10 bits 7:0, CSI in CDW11 bits 31:24.
    pub fn identify(nsid: u32, cns: u8, csi: u8) -> Command {
        Command { opcode: OPC_ADMIN_IDENTIFY, nsid, cdw: [cns as u32, (csi as u32) << 24, 0, 0, 0, 0] }
    }

    fn uring(&self, data: &mut [u8], metadata: &mut [u8]) -> NvmeUringCmd {
        NvmeUringCmd {
            opcode: self.opcode,
            nsid: self.nsid,
            addr: if data.is_empty() { 0 } else { data.as_mut_ptr() as u64 },
            data_len: data.len() as u32,
            metadata: if metadata.is_empty() { 0 } else { metadata.as_mut_ptr() as u64 },
            metadata_len: metadata.len() as u32,
            cdw10: self.cdw[0],
            cdw11: self.cdw[1],
            cdw12: self.cdw[2],
            cdw13: self.cdw[3],
            cdw14: self.cdw[4],
            cdw15: self.cdw[5],
            ..NvmeUringCmd::default()
        }
    }
}

// ---------------------------------------------------------------------------------------
// Status codes

/// The Status Field's type and code (SCT bits 10:8, SC bits 7:0), without CRD, More and
/// DNR.
pub(crate) fn status_code(status: u32) -> u16 {
    (status & 0x7FF) as u16
}

/// A human name for a status code (the common ones; others by number).
pub(crate) fn status_name(code: u16) -> &'static str {
    match code {
        0x000 => "Successful Completion",
        0x001 => "Invalid Command Opcode",
        0x002 => "Invalid Field in Command",
        0x004 => "Data Transfer Error",
        0x006 => "Internal Error",
        0x007 => "Command Abort Requested",
        0x00B => "Invalid Namespace or Format",
        0x00F => "Invalid SGL Segment Descriptor",
        0x080 => "LBA Out of Range",
        0x081 => "Capacity Exceeded",
        0x082 => "Namespace Not Ready",
        0x1B8 => "Zone Boundary Error",
        0x1B9 => "Zone Is Full",
        0x1BA => "Zone Is Read Only",
        0x1BB => "Zone Is Offline",
        0x1BC => "Zone Invalid Write",
        0x1BD => "Too Many Active Zones",
        0x1BE => "Too Many Open Zones",
        0x1BF => "Invalid Zone State Transition",
        0x280 => "Write Fault",
        0x281 => "Unrecovered Read Error",
        0x282 => "End-to-end Guard Check Error",
        0x285 => "Compare Failure",
        0x286 => "Access Denied",
        _ => "unknown status",
    }
}

/// What a failed command was doing, for turning its status into a [`ZoneError`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Failed {
    pub op: &'static str,
    pub zone: u32,
    pub lba: u64,
    pub len_lbas: u64,
    pub zone_op: Option<ZoneOp>,
    /// The zone's condition and write pointer read after the failure, when known.
    pub condition: Option<ZoneCondition>,
    pub write_pointer_lba: Option<u64>,
}

impl Failed {
    fn new(op: &'static str, zone: u32, lba: u64, len_lbas: u64) -> Failed {
        Failed { op, zone, lba, len_lbas, zone_op: None, condition: None, write_pointer_lba: None }
    }
}

/// Maps an NVMe status to the [`ZoneError`] the emulator gives for the same mistake; a
/// status with no such variant becomes `Io`, naming it.
pub(crate) fn status_error(status: u32, failed: &Failed, geometry: &Geometry) -> ZoneError {
    let code = status_code(status);
    let zone = failed.zone;
    match code {
        0x1B8 if failed.op == "read" => {
            ZoneError::CrossesZoneCapacity { zone, lba: failed.lba, end: failed.lba + failed.len_lbas }
        }
        0x1B8 => ZoneError::ExceedsCapacity {
            zone,
            offset_lbas: failed.lba.saturating_sub(geometry.zone_start_lba(zone.min(geometry.zone_count - 1))),
            len_bytes: failed.len_lbas * geometry.lba_bytes as u64,
            capacity_lbas: geometry.zone_capacity_lbas,
        },
        0x1B9 => ZoneError::ZoneFull { zone },
        0x1BA => ZoneError::ZoneReadOnly { zone },
        0x1BB => ZoneError::ZoneOffline { zone },
        0x1BC => ZoneError::NotAtWritePointer {
            zone,
            lba: failed.lba,
            write_pointer: failed.write_pointer_lba.unwrap_or(failed.lba),
        },
        0x1BD => ZoneError::TooManyActiveZones { zone, max_active: geometry.max_active_zones },
        0x1BE => ZoneError::TooManyOpenZones { zone, max_open: geometry.max_open_zones },
        0x1BF if failed.zone_op.is_some() && failed.condition.is_some() => ZoneError::InvalidTransition {
            zone,
            op: failed.zone_op.unwrap_or(ZoneOp::Reset),
            condition: failed.condition.unwrap_or(ZoneCondition::Offline),
        },
        0x080 => ZoneError::LbaOutOfRange { lba: failed.lba, total_lbas: geometry.total_lbas() },
        _ => ZoneError::io(
            failed.op,
            io::Error::other(format!(
                "NVMe status 0x{code:03x} ({}; SCT {}, SC 0x{:02x}{}) on zone {zone}, LBA {}",
                status_name(code),
                code >> 8,
                code & 0xFF,
                if status & 0x4000 != 0 { ", do not retry" } else { "" },
                failed.lba
            )),
        ),
    }
}

// ---------------------------------------------------------------------------------------
// Identify data

fn u32_at(buffer: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(buffer[offset..offset + 4].try_into().expect("four bytes"))
}
fn u64_at(buffer: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(buffer[offset..offset + 8].try_into().expect("eight bytes"))
}

/// One LBA Format descriptor of Identify Namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LbaFormat {
    pub metadata_bytes: u16,
    /// log2 of the LBA data size.
    pub lbads: u8,
}

/// What Identify Namespace (CNS 0) says about the format in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NamespaceFormat {
    /// Namespace size in LBAs.
    pub nsze: u64,
    /// Index of the LBA format in use.
    pub lbaf_index: u8,
    pub lbaf: LbaFormat,
    /// FLBAS bit 4: metadata travels at the end of each LBA's data (extended LBA).
    pub extended: bool,
    /// DPS bits 2:0: the protection information type (0: none).
    pub pi_type: u8,
}

/// Parses Identify Namespace (CNS 0, 4096 bytes).
pub(crate) fn parse_identify_namespace(data: &[u8]) -> NamespaceFormat {
    let nsze = u64_at(data, 0);
    let nlbaf = data[25] as usize + 1;
    let flbas = data[26];
    // FLBAS bits 3:0 index the format; bits 6:5 add the high bits when there are more
    // than 16 formats.
    let mut index = flbas & 0xF;
    if nlbaf > 16 {
        index |= ((flbas >> 5) & 0x3) << 4;
    }
    let lbaf = u32_at(data, 128 + 4 * index as usize);
    NamespaceFormat {
        nsze,
        lbaf_index: index,
        lbaf: LbaFormat { metadata_bytes: lbaf as u16, lbads: (lbaf >> 16) as u8 },
        extended: flbas & 0x10 != 0,
        pi_type: data[29] & 0x7,
    }
}

/// What the ZNS Identify Namespace (CNS 5, CSI 2) says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ZnsNamespace {
    /// Maximum Active Resources, 0-based; `u32::MAX` is no limit.
    pub mar: u32,
    /// Maximum Open Resources, 0-based; `u32::MAX` is no limit.
    pub mor: u32,
    /// Zone size in LBAs of the LBA format in use (its LBA Format Extension).
    pub zone_size_lbas: u64,
}

pub(crate) fn parse_zns_identify_namespace(data: &[u8], lbaf_index: u8) -> ZnsNamespace {
    // The LBA Format Extension data structures start at byte 2816, 16 bytes each.
    let lbafe = 2816 + 16 * lbaf_index as usize;
    ZnsNamespace { mar: u32_at(data, 4), mor: u32_at(data, 8), zone_size_lbas: u64_at(data, lbafe) }
}

/// The Command Set Identifier in a Namespace Identification Descriptor list (CNS 3), if
/// the list has one (NIDT 4).
pub(crate) fn parse_csi(descriptors: &[u8]) -> Option<u8> {
    let mut offset = 0;
    while offset + 4 <= descriptors.len() {
        let (kind, len) = (descriptors[offset], descriptors[offset + 1] as usize);
        if kind == 0 || len == 0 {
            return None;
        }
        if kind == 4 && len >= 1 && offset + 4 < descriptors.len() {
            return Some(descriptors[offset + 4]);
        }
        offset += 4 + len;
    }
    None
}

/// Turns an open/active resource limit (0-based, all ones for none) into the geometry's
/// convention (a count, 0 for none), clamped to the zone count.
fn resource_limit(zero_based: u32, zone_count: u32) -> u32 {
    if zero_based == u32::MAX {
        0
    } else {
        (zero_based.saturating_add(1)).min(zone_count)
    }
}

/// Memory page size assumed for MDTS and ZASL (CAP.MPSMIN is a register the host cannot
/// read from user space; 4 KiB is what Linux and every device we know use).
const MIN_PAGE_BYTES: u64 = 4096;
/// The largest data transfer of one command we issue, whatever the device allows: big
/// enough to stream, small enough for the kernel's default segment limits.
const TRANSFER_CAP_BYTES: u64 = 1 << 20;

/// Bytes one command may move, from MDTS (0: no limit) and the kernel's queue limit.
fn transfer_limit_bytes(mdts: u8, kernel_max_bytes: Option<u64>) -> u64 {
    let mut limit = TRANSFER_CAP_BYTES;
    if mdts != 0 && mdts < 32 {
        limit = limit.min(MIN_PAGE_BYTES << mdts);
    }
    if let Some(kernel) = kernel_max_bytes.filter(|&k| k >= MIN_PAGE_BYTES) {
        limit = limit.min(kernel);
    }
    limit
}

/// How data and metadata sit in a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    pub lba_bytes: u32,
    pub metadata_bytes: u32,
    /// Metadata interleaved after each LBA's data in the data buffer.
    pub extended: bool,
}

impl Format {
    /// Bytes each LBA takes in the data buffer.
    pub fn transfer_bytes_per_lba(&self) -> u64 {
        self.lba_bytes as u64 + if self.extended { self.metadata_bytes as u64 } else { 0 }
    }

    /// Bytes each LBA takes in the separate metadata buffer.
    pub fn separate_metadata_bytes_per_lba(&self) -> u64 {
        if self.extended {
            0
        } else {
            self.metadata_bytes as u64
        }
    }
}

/// Checks the format in use is one we can drive.
pub(crate) fn check_format(format: &NamespaceFormat) -> std::result::Result<Format, String> {
    if format.pi_type != 0 {
        return Err(format!(
            "protection information type {} is enabled; znswap keeps its own records in the metadata, so format the namespace without protection information (nvme format --pi=0)",
            format.pi_type
        ));
    }
    let lba_bytes = 1u64.checked_shl(format.lbaf.lbads as u32).unwrap_or(0);
    if !LBA_BYTES_ALLOWED.iter().any(|&allowed| allowed as u64 == lba_bytes) {
        return Err(format!(
            "LBA format {} has {} B data blocks (LBADS {}); use a 512 B or 4 KiB format (nvme format --lbaf=N)",
            format.lbaf_index, lba_bytes, format.lbaf.lbads
        ));
    }
    let metadata_bytes = format.lbaf.metadata_bytes as u32;
    if !METADATA_BYTES_ALLOWED.contains(&metadata_bytes) {
        return Err(format!(
            "LBA format {} has {metadata_bytes} B of metadata per LBA; use a format with 0, 8, 16 or 64 B (nvme format --lbaf=N)",
            format.lbaf_index
        ));
    }
    Ok(Format { lba_bytes: lba_bytes as u32, metadata_bytes, extended: format.extended && metadata_bytes != 0 })
}

/// Device facts gathered at open, before the zone report.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Facts {
    pub format: Format,
    pub nsze: u64,
    pub zns: ZnsNamespace,
    pub mdts: u8,
    pub zasl: u8,
    pub kernel_max_transfer_bytes: Option<u64>,
    /// The controller is a QEMU older than 9.0, whose metadata DMA loses data (see
    /// [`qemu_metadata_dma_bug`]).
    pub qemu_metadata_dma_bug: bool,
}

/// Bytes of metadata one command may move on a QEMU with the metadata DMA bug, unless
/// it moves a multiple of them.
const QEMU_METADATA_DMA_BYTES: u64 = 512;

/// Whether Identify Controller data names a QEMU emulated controller older than 9.0.
///
/// Before 9.0, QEMU's DMA helper, asked to trim a transfer to a multiple of 512 B, drops
/// the aligned part instead of the unaligned tail: a transfer over 512 B and not a
/// multiple of 512 B moves only its first `length % 512` bytes (Debian 12 ships 7.2 with
/// the bug). Data transfers are whole LBAs and never hit it, but metadata does, in both
/// directions and for separate and extended formats alike: 33 LBAs of 16 B metadata
/// (528 B) keep only the first LBA's record, the rest reads back as zeroes (measured in
/// the QEMU rig). The firmware revision of a QEMU controller is its version.
pub(crate) fn qemu_metadata_dma_bug(identify_controller: &[u8]) -> bool {
    const QEMU_VENDOR_ID: u16 = 0x1B36;
    let vendor = u16::from_le_bytes([identify_controller[0], identify_controller[1]]);
    if vendor != QEMU_VENDOR_ID {
        return false;
    }
    let firmware = String::from_utf8_lossy(&identify_controller[64..72]);
    let major: Option<u32> = firmware.trim().split('.').next().and_then(|major| major.parse().ok());
    major.is_none_or(|major| major < 9)
}

/// On a device with the QEMU metadata DMA bug, the LBAs whose metadata makes 512 B: a
/// command moving more than that must move a multiple of it.
pub(crate) fn metadata_split_lbas(facts: &Facts) -> Option<u64> {
    let metadata_bytes = facts.format.metadata_bytes as u64;
    (facts.qemu_metadata_dma_bug && metadata_bytes != 0).then(|| (QEMU_METADATA_DMA_BYTES / metadata_bytes).max(1))
}

/// `lbas` cut down to a multiple of `unit` when it is above it.
fn round_to_unit(lbas: u64, unit: Option<u64>) -> u64 {
    match unit {
        Some(unit) if lbas > unit => lbas - lbas % unit,
        _ => lbas,
    }
}

/// Limits derived from the facts: per-command LBAs and the zone append size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// LBAs one Read or Write may move (data and any interleaved metadata fit MDTS).
    pub transfer_max_lbas: u64,
    pub append_max_bytes: u32,
}

pub(crate) fn derive_limits(facts: &Facts, zone_capacity_lbas: u64) -> Limits {
    let format = &facts.format;
    let transfer = transfer_limit_bytes(facts.mdts, facts.kernel_max_transfer_bytes);
    // NLB is 16 bits.
    let unit = metadata_split_lbas(facts);
    let transfer_max_lbas = round_to_unit((transfer / format.transfer_bytes_per_lba()).clamp(1, 1 << 16), unit);
    // ZASL 0 means "as MDTS"; otherwise it is a power of two of the minimum page size.
    let zasl_bytes = if facts.zasl == 0 || facts.zasl >= 32 { u64::MAX } else { MIN_PAGE_BYTES << facts.zasl };
    let append_lbas = round_to_unit(
        transfer_max_lbas.min(zasl_bytes / format.transfer_bytes_per_lba()).min(zone_capacity_lbas).max(1),
        unit,
    );
    Limits { transfer_max_lbas, append_max_bytes: (append_lbas * format.lba_bytes as u64) as u32 }
}

/// The geometry a namespace presents, from its facts and the zone capacity its report
/// gave.
pub(crate) fn derive_geometry(facts: &Facts, zone_capacity_lbas: u64) -> std::result::Result<Geometry, NvmeErrorKind> {
    let zone_size_lbas = facts.zns.zone_size_lbas;
    if zone_size_lbas == 0 || facts.nsze % zone_size_lbas != 0 {
        return Err(NvmeErrorKind::Format(format!(
            "namespace size {} LBAs is not a whole number of {zone_size_lbas}-LBA zones",
            facts.nsze
        )));
    }
    let zone_count = u32::try_from(facts.nsze / zone_size_lbas).map_err(|_| {
        NvmeErrorKind::Format(format!("{} zones are more than znswap addresses", facts.nsze / zone_size_lbas))
    })?;
    let mut max_open = resource_limit(facts.zns.mor, zone_count);
    let max_active = resource_limit(facts.zns.mar, zone_count);
    // Every open zone is active: an open limit above the active one (or none under an
    // active limit) is really the active limit.
    if max_active != 0 && (max_open == 0 || max_open > max_active) {
        max_open = max_active;
    }
    let limits = derive_limits(facts, zone_capacity_lbas);
    let format = &facts.format;
    let geometry = Geometry {
        lba_bytes: format.lba_bytes,
        metadata_bytes: format.metadata_bytes,
        zone_count,
        zone_size_lbas,
        zone_capacity_lbas,
        max_open_zones: max_open,
        max_active_zones: max_active,
        write_granularity_bytes: format.lba_bytes,
        zone_append_max_bytes: limits.append_max_bytes,
    };
    geometry.validate().map_err(NvmeErrorKind::Geometry)?;
    Ok(geometry)
}

// ---------------------------------------------------------------------------------------
// Zone reports

/// Bytes of the report header and of each zone descriptor.
const REPORT_HEADER_BYTES: usize = 64;
const ZONE_DESCRIPTOR_BYTES: usize = 64;

/// Parses a Report Zones buffer for zones from `first_zone`, converting to [`ZoneInfo`]
/// with Linux's write pointer convention (Full and Offline zones: start + zone size).
pub(crate) fn parse_zone_report(
    buffer: &[u8],
    first_zone: u32,
    zone_size_lbas: u64,
    max_zones: usize,
) -> std::result::Result<Vec<ZoneInfo>, String> {
    let reported = u64_at(buffer, 0) as usize;
    let fits = (buffer.len() - REPORT_HEADER_BYTES) / ZONE_DESCRIPTOR_BYTES;
    let count = reported.min(fits).min(max_zones);
    let mut zones = Vec::with_capacity(count);
    for index in 0..count {
        let descriptor = &buffer[REPORT_HEADER_BYTES + index * ZONE_DESCRIPTOR_BYTES..][..ZONE_DESCRIPTOR_BYTES];
        let zone = first_zone + index as u32;
        let zone_type = descriptor[0] & 0xF;
        let state = descriptor[1] >> 4;
        let capacity_lbas = u64_at(descriptor, 8);
        let start_lba = u64_at(descriptor, 16);
        let device_write_pointer = u64_at(descriptor, 24);
        if zone_type != 0x2 {
            return Err(format!("zone {zone} has type {zone_type:#x}, not Sequential Write Required"));
        }
        if start_lba != zone as u64 * zone_size_lbas {
            return Err(format!("zone {zone} starts at LBA {start_lba}, expected {}", zone as u64 * zone_size_lbas));
        }
        let condition =
            ZoneCondition::from_code(state).ok_or_else(|| format!("zone {zone} reports unknown state {state:#x}"))?;
        let end = start_lba + zone_size_lbas;
        let write_pointer_lba = match condition {
            ZoneCondition::Full | ZoneCondition::Offline => end,
            ZoneCondition::Empty => start_lba,
            // Undefined for a Read Only zone: keep what the device says, inside the zone.
            ZoneCondition::ReadOnly => device_write_pointer.clamp(start_lba, start_lba + capacity_lbas),
            _ => device_write_pointer,
        };
        if condition.is_active() && !(start_lba..=start_lba + capacity_lbas).contains(&write_pointer_lba) {
            return Err(format!("zone {zone} reports write pointer {write_pointer_lba} outside its capacity"));
        }
        zones.push(ZoneInfo { zone, start_lba, len_lbas: zone_size_lbas, capacity_lbas, write_pointer_lba, condition });
    }
    Ok(zones)
}

// ---------------------------------------------------------------------------------------
// Extended LBAs

/// Interleaves `data` and per-LBA `metadata` (zeroes when `None`) into `out`, each LBA's
/// data followed by its metadata, as an extended-LBA namespace stores them.
pub(crate) fn pack_extended(format: &Format, data: &[u8], metadata: Option<&[u8]>, out: &mut [u8]) {
    let (lba, md) = (format.lba_bytes as usize, format.metadata_bytes as usize);
    for (index, block) in out.chunks_exact_mut(lba + md).enumerate() {
        block[..lba].copy_from_slice(&data[index * lba..][..lba]);
        match metadata {
            Some(metadata) => block[lba..].copy_from_slice(&metadata[index * md..][..md]),
            None => block[lba..].fill(0),
        }
    }
}

/// Splits an extended-LBA buffer back into data and (when wanted) metadata.
pub(crate) fn unpack_extended(format: &Format, packed: &[u8], data: &mut [u8], mut metadata: Option<&mut [u8]>) {
    let (lba, md) = (format.lba_bytes as usize, format.metadata_bytes as usize);
    for (index, block) in packed.chunks_exact(lba + md).enumerate() {
        data[index * lba..][..lba].copy_from_slice(&block[..lba]);
        if let Some(metadata) = metadata.as_deref_mut() {
            metadata[index * md..][..md].copy_from_slice(&block[lba..]);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Errors of opening a namespace

/// Why a namespace cannot be used; each message says what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum NvmeError {
    #[error("cannot open {path}: {source}{hint}", hint = if .source.kind() == io::ErrorKind::PermissionDenied { " (NVMe passthrough needs root, or read/write access to the device)" } else { "" })]
    Open { path: PathBuf, source: io::Error },
    #[error("{path} is a {kind}, not an NVMe generic char device; use /dev/ngXnY for passthrough (a zoned /dev/nvmeXnY block device works through the zoned block device backend)")]
    NotCharDevice { path: PathBuf, kind: &'static str },
    #[error(
        "{path} is not an NVMe namespace ({source}); use the namespace's generic char device /dev/ngXnY (ls /dev/ng*)"
    )]
    NotNvme { path: PathBuf, source: io::Error },
    #[error("{path}: Identify {what} failed: {detail}{hint}", hint = if .detail.contains("Permission denied") || .detail.contains("Operation not permitted") { " (admin passthrough needs CAP_SYS_ADMIN: run as root)" } else { "" })]
    Identify { path: PathBuf, what: &'static str, detail: String },
    #[error("{path}: namespace {nsid} uses command set {csi} ({name}), not Zoned Namespace (CSI 2); use a ZNS namespace, or an emulated device (`znswap device create`)", name = if *.csi == 0 { "NVM" } else { "not ZNS" })]
    NotZoned { path: PathBuf, nsid: u32, csi: u8 },
    #[error("{path}: cannot use the namespace's format: {reason}")]
    UnsupportedFormat { path: PathBuf, reason: String },
    #[error("{path}: this kernel cannot run NVMe commands through io_uring ({source}); NVMe passthrough needs Linux 5.19 or later with IORING_OP_URING_CMD on the generic char device, rings with SQE128/CQE32, and io_uring enabled (sysctl kernel.io_uring_disabled=0); use the zoned block device /dev/nvmeXnY instead")]
    NoUringCmd { path: PathBuf, source: io::Error },
    #[error("{path}: reading the zones failed: {source}")]
    Report { path: PathBuf, source: ZoneError },
    #[error("{path}: zones have unequal capacities (zone {zone} holds {capacity_lbas} LBAs, zone 0 {first_lbas}); znswap needs one capacity for every zone")]
    UnequalCapacities { path: PathBuf, zone: u32, capacity_lbas: u64, first_lbas: u64 },
    #[error("{path}: the namespace's geometry is not usable: {source}")]
    Geometry { path: PathBuf, source: GeometryError },
}

/// [`derive_geometry`]'s failures, before the path is attached.
#[derive(Debug)]
pub(crate) enum NvmeErrorKind {
    Format(String),
    Geometry(GeometryError),
}

impl NvmeErrorKind {
    fn at(self, path: &Path) -> NvmeError {
        match self {
            NvmeErrorKind::Format(reason) => NvmeError::UnsupportedFormat { path: path.to_path_buf(), reason },
            NvmeErrorKind::Geometry(source) => NvmeError::Geometry { path: path.to_path_buf(), source },
        }
    }
}

// ---------------------------------------------------------------------------------------
// Rings and buffers

/// A growable buffer handing out 4 KiB-aligned slices (page-aligned buffers let the
/// kernel map them for DMA directly instead of copying).
#[derive(Default)]
struct AlignedBuffer {
    storage: Vec<u8>,
}

const BUFFER_ALIGN_BYTES: usize = 4096;

impl AlignedBuffer {
    fn get(&mut self, len: usize) -> &mut [u8] {
        if self.storage.len() < len + BUFFER_ALIGN_BYTES {
            self.storage = vec![0; len + BUFFER_ALIGN_BYTES];
        }
        let skew = self.storage.as_ptr().align_offset(BUFFER_ALIGN_BYTES);
        &mut self.storage[skew..skew + len]
    }
}

type Ring = IoUring<squeue::Entry128, cqueue::Entry32>;

/// One ring with the buffers its command uses.
struct Slot {
    ring: Ring,
    data: AlignedBuffer,
    metadata: AlignedBuffer,
}

/// A completed command: `res` (0, a positive NVMe status, or -errno) and the 64-bit
/// command result (Zone Append's LBA).
#[derive(Clone, Copy, Debug)]
struct Completion {
    res: i32,
    result: u64,
}

/// A command that could not be issued or reaped. `lost` means the kernel may still own
/// the slot's buffers: the slot must be leaked, never reused or freed.
struct RingFailure {
    source: io::Error,
    lost: bool,
}

const COMMAND_TAG: u64 = 0x6e76_6d65; // "nvme"

impl Slot {
    fn new() -> io::Result<Slot> {
        // SQE128 and CQE32 come from the entry types; 4 entries is plenty for one command.
        let ring = Ring::builder().build(4)?;
        Ok(Slot { ring, data: AlignedBuffer::default(), metadata: AlignedBuffer::default() })
    }

    /// Submits `command` with `data_len` bytes of the data buffer and `metadata_len` of
    /// the metadata buffer, and waits for it.
    fn execute(
        &mut self,
        fd: i32,
        command: &Command,
        data_len: usize,
        metadata_len: usize,
    ) -> std::result::Result<Completion, RingFailure> {
        let data = self.data.get(data_len);
        let metadata = self.metadata.get(metadata_len);
        let cmd = command.uring(data, metadata).to_sqe_cmd();
        let entry = opcode::UringCmd80::new(types::Fd(fd), NVME_URING_CMD_IO).cmd(cmd).build().user_data(COMMAND_TAG);
        // SAFETY: the entry points at this slot's data and metadata buffers, which are
        // neither moved nor freed until the completion is reaped below; if it cannot be
        // reaped, the caller leaks the slot (`lost`), so the kernel never writes into
        // freed memory.
        unsafe { self.ring.submission().push(&entry) }
            .map_err(|_| RingFailure { source: io::Error::other("the submission queue is full"), lost: false })?;
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(error) if matches!(error.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)) => {}
                Err(source) => return Err(RingFailure { source, lost: true }),
            }
            if let Some(entry) = self.ring.completion().next() {
                if entry.user_data() != COMMAND_TAG {
                    return Err(RingFailure {
                        source: io::Error::other("completion of an unknown command"),
                        lost: true,
                    });
                }
                return Ok(Completion { res: entry.result(), result: entry.big_cqe()[0] });
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The namespace

/// An NVMe ZNS namespace driven through its generic char device with io_uring
/// passthrough. Wrap it in [`CheckedDevice`](crate::CheckedDevice) to use it.
pub struct NvmeNamespace {
    file: File,
    path: PathBuf,
    nsid: u32,
    format: Format,
    geometry: Geometry,
    limits: Limits,
    /// Idle rings; a caller finding none makes another.
    slots: Mutex<Vec<Slot>>,
    /// Set on a QEMU with the metadata DMA bug ([`qemu_metadata_dma_bug`]): commands
    /// moving more than this many LBAs move a multiple of them, and an append that cannot
    /// is split in two under the zone's append lock.
    metadata_split_lbas: Option<u64>,
    /// One per zone with the QEMU workaround (else empty): held by every append to the
    /// zone, so the two halves of a split append land together.
    append_locks: Box<[Mutex<()>]>,
}

fn admin_identify(file: &File, nsid: u32, cns: u8, csi: u8) -> std::result::Result<Vec<u8>, String> {
    let mut buffer = AlignedBuffer::default();
    let data = buffer.get(4096);
    let command = Command::identify(nsid, cns, csi);
    let mut cmd = NvmePassthruCmd {
        opcode: command.opcode,
        nsid,
        addr: data.as_mut_ptr() as u64,
        data_len: data.len() as u32,
        cdw10: command.cdw[0],
        cdw11: command.cdw[1],
        ..NvmePassthruCmd::default()
    };
    // SAFETY: `cmd` is a valid nvme_admin_cmd whose data pointer covers the 4096 bytes of
    // `data`, which outlive the synchronous ioctl.
    let status = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_ADMIN_CMD as _, &mut cmd) };
    match status {
        0 => Ok(data.to_vec()),
        s if s < 0 => Err(io::Error::last_os_error().to_string()),
        s => {
            let code = status_code(s as u32);
            Err(format!("NVMe status 0x{code:03x} ({})", status_name(code)))
        }
    }
}

/// The kernel's transfer limit for the namespace, from the block device's queue (best
/// effort: the block device of an extended-LBA namespace may be hidden). A passthrough
/// buffer must fit both the largest request and the segment count; our buffers are
/// page-aligned, so each page is at most one segment.
fn kernel_max_transfer_bytes(path: &Path) -> Option<u64> {
    let canonical = std::fs::canonicalize(path).ok()?;
    let name = canonical.file_name()?.to_str()?;
    let queue = format!("/sys/block/nvme{}/queue", name.strip_prefix("ng")?);
    let read = |file: &str| std::fs::read_to_string(format!("{queue}/{file}")).ok()?.trim().parse::<u64>().ok();
    let request_bytes = read("max_hw_sectors_kb")? * 1024;
    let segment_bytes = read("max_segments").map_or(u64::MAX, |segments| segments * MIN_PAGE_BYTES);
    Some(request_bytes.min(segment_bytes))
}

fn is_no_uring_cmd(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS | libc::EPERM | libc::ENOTTY))
}

impl NvmeNamespace {
    /// Opens the NVMe ZNS namespace behind the generic char device at `path`.
    pub fn open(path: &Path) -> std::result::Result<NvmeNamespace, NvmeError> {
        let path_buf = path.to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| NvmeError::Open { path: path_buf.clone(), source })?;
        let file_type =
            file.metadata().map_err(|source| NvmeError::Open { path: path_buf.clone(), source })?.file_type();
        if !file_type.is_char_device() {
            let kind = if file_type.is_block_device() {
                "block device"
            } else if file_type.is_dir() {
                "directory"
            } else {
                "regular file"
            };
            return Err(NvmeError::NotCharDevice { path: path_buf, kind });
        }
        // SAFETY: NVME_IOCTL_ID takes no argument; on other devices it fails with ENOTTY.
        let nsid = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_ID as _) };
        if nsid <= 0 {
            let source = if nsid < 0 { io::Error::last_os_error() } else { io::Error::other("namespace id 0") };
            return Err(NvmeError::NotNvme { path: path_buf, source });
        }
        let nsid = nsid as u32;
        let identify = |what: &'static str, nsid: u32, cns: u8, csi: u8| {
            admin_identify(&file, nsid, cns, csi).map_err(|detail| NvmeError::Identify {
                path: path_buf.clone(),
                what,
                detail,
            })
        };

        // The command set: the descriptor list names it; controllers without the list
        // (NVMe < 1.3) predate ZNS.
        let csi = identify("Namespace Identification Descriptors", nsid, CNS_NS_DESCRIPTORS, 0)
            .ok()
            .and_then(|list| parse_csi(&list))
            .unwrap_or(0);
        if csi != CSI_ZNS {
            return Err(NvmeError::NotZoned { path: path_buf, nsid, csi });
        }
        let namespace = parse_identify_namespace(&identify("Namespace", nsid, CNS_NAMESPACE, 0)?);
        let format = check_format(&namespace)
            .map_err(|reason| NvmeError::UnsupportedFormat { path: path_buf.clone(), reason })?;
        let zns = parse_zns_identify_namespace(
            &identify("ZNS Namespace", nsid, CNS_CSI_NAMESPACE, CSI_ZNS)?,
            namespace.lbaf_index,
        );
        let controller = identify("Controller", 0, CNS_CONTROLLER, 0)?;
        let zasl = identify("ZNS Controller", 0, CNS_CSI_CONTROLLER, CSI_ZNS)?[0];
        let facts = Facts {
            format,
            nsze: namespace.nsze,
            zns,
            mdts: controller[77],
            zasl,
            kernel_max_transfer_bytes: kernel_max_transfer_bytes(path),
            qemu_metadata_dma_bug: qemu_metadata_dma_bug(&controller),
        };

        // A provisional geometry (capacity = size) to read the zones with; the real
        // capacity comes from the report.
        let provisional = derive_geometry(&facts, zns.zone_size_lbas.max(1)).map_err(|kind| kind.at(path))?;
        let slot = Slot::new().map_err(|source| NvmeError::NoUringCmd { path: path_buf.clone(), source })?;
        let mut namespace = NvmeNamespace {
            file,
            path: path_buf.clone(),
            nsid,
            format,
            geometry: provisional,
            limits: derive_limits(&facts, provisional.zone_capacity_lbas),
            slots: Mutex::new(vec![slot]),
            metadata_split_lbas: metadata_split_lbas(&facts),
            append_locks: Box::new([]),
        };
        // A one-zone report (128 bytes, valid on any kernel that has the command) probes
        // for uring_cmd support, so "unsupported" is not confused with a refused command.
        match namespace.report_inner(0, 1) {
            Ok(_) => {}
            Err(Probe::Ring(source)) if is_no_uring_cmd(&source) => {
                return Err(NvmeError::NoUringCmd { path: path_buf, source })
            }
            Err(probe) => return Err(NvmeError::Report { path: path_buf, source: probe.into() }),
        }
        let zones = namespace
            .report_inner(0, provisional.zone_count)
            .map_err(|probe| NvmeError::Report { path: path_buf.clone(), source: probe.into() })?;
        let usable = |z: &&ZoneInfo| !matches!(z.condition, ZoneCondition::Offline);
        let first_lbas = zones.iter().find(usable).map(|z| z.capacity_lbas).unwrap_or(zns.zone_size_lbas);
        if let Some(odd) = zones.iter().filter(usable).find(|z| z.capacity_lbas != first_lbas) {
            return Err(NvmeError::UnequalCapacities {
                path: path_buf,
                zone: odd.zone,
                capacity_lbas: odd.capacity_lbas,
                first_lbas,
            });
        }
        namespace.geometry = derive_geometry(&facts, first_lbas).map_err(|kind| kind.at(path))?;
        namespace.limits = derive_limits(&facts, first_lbas);
        if namespace.metadata_split_lbas.is_some() {
            namespace.append_locks = (0..namespace.geometry.zone_count).map(|_| Mutex::new(())).collect();
        }
        Ok(namespace)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Runs `f` with a ring slot, returning it to the pool afterwards (or leaking it if
    /// a command was lost).
    fn with_slot<T>(
        &self,
        f: impl FnOnce(&mut Slot) -> std::result::Result<T, RingFailure>,
    ) -> std::result::Result<T, io::Error> {
        let idle = self.slots.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut slot = match idle {
            Some(slot) => slot,
            None => Slot::new()?,
        };
        match f(&mut slot) {
            Ok(value) => {
                self.slots.lock().unwrap_or_else(|p| p.into_inner()).push(slot);
                Ok(value)
            }
            Err(RingFailure { source, lost }) => {
                if lost {
                    std::mem::forget(slot);
                } else {
                    self.slots.lock().unwrap_or_else(|p| p.into_inner()).push(slot);
                }
                Err(source)
            }
        }
    }

    fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    /// Turns a completion's `res` into a result; `failed` describes the command.
    fn check(&self, res: i32, mut failed: Failed) -> Result<()> {
        if res == 0 {
            return Ok(());
        }
        if res < 0 {
            return Err(ZoneError::io(failed.op, io::Error::from_raw_os_error(-res)));
        }
        // Errors whose typed form names the zone's state: read it (best effort).
        if matches!(status_code(res as u32), 0x1BC | 0x1BF) && failed.zone < self.geometry.zone_count {
            if let Ok(zones) = self.report_inner(failed.zone, 1) {
                if let Some(info) = zones.first() {
                    failed.condition = Some(info.condition);
                    failed.write_pointer_lba = Some(info.write_pointer_lba);
                }
            }
        }
        Err(status_error(res as u32, &failed, &self.geometry))
    }

    fn report_inner(&self, first_zone: u32, count: u32) -> std::result::Result<Vec<ZoneInfo>, Probe> {
        let zone_size_lbas = self.geometry.zone_size_lbas;
        let per_command = ((self.limits.transfer_max_lbas * self.format.lba_bytes as u64).min(TRANSFER_CAP_BYTES)
            as usize
            - REPORT_HEADER_BYTES)
            / ZONE_DESCRIPTOR_BYTES;
        let per_command = per_command.max(1);
        let mut zones = Vec::with_capacity(count as usize);
        while zones.len() < count as usize {
            let zone = first_zone + zones.len() as u32;
            let want = (count as usize - zones.len()).min(per_command);
            let bytes = REPORT_HEADER_BYTES + want * ZONE_DESCRIPTOR_BYTES;
            let command = Command::report_zones(self.nsid, zone as u64 * zone_size_lbas, bytes as u32);
            let parsed = self
                .with_slot(|slot| {
                    slot.data.get(bytes).fill(0);
                    let completion = slot.execute(self.fd(), &command, bytes, 0)?;
                    let parsed = (completion.res == 0)
                        .then(|| parse_zone_report(slot.data.get(bytes), zone, zone_size_lbas, want));
                    Ok((completion, parsed))
                })
                .map_err(Probe::Ring)?;
            match parsed {
                (completion, None) => {
                    if completion.res < 0 {
                        return Err(Probe::Ring(io::Error::from_raw_os_error(-completion.res)));
                    }
                    let failed = Failed::new("report", zone, zone as u64 * zone_size_lbas, 0);
                    return Err(Probe::Zone(status_error(completion.res as u32, &failed, &self.geometry)));
                }
                (_, Some(Err(message))) => {
                    return Err(Probe::Zone(ZoneError::io("report", io::Error::other(message))));
                }
                (_, Some(Ok(batch))) => {
                    if batch.is_empty() {
                        return Err(Probe::Zone(ZoneError::io(
                            "report",
                            io::Error::other(format!("the device reported no zones from zone {zone}")),
                        )));
                    }
                    zones.extend(batch);
                }
            }
        }
        Ok(zones)
    }

    /// Reads or writes `len_lbas` at `lba` in one command through the slot's buffers.
    fn transfer_chunk(
        &self,
        command: Command,
        len_lbas: u64,
        stage: impl FnOnce(&mut [u8], &mut [u8]),
        unstage: impl FnOnce(&[u8], &[u8]),
    ) -> std::result::Result<Completion, io::Error> {
        let data_len = (len_lbas * self.format.transfer_bytes_per_lba()) as usize;
        let metadata_len = (len_lbas * self.format.separate_metadata_bytes_per_lba()) as usize;
        self.with_slot(|slot| {
            stage(slot.data.get(data_len), slot.metadata.get(metadata_len));
            let completion = slot.execute(self.fd(), &command, data_len, metadata_len)?;
            if completion.res == 0 {
                unstage(slot.data.get(data_len), slot.metadata.get(metadata_len));
            }
            Ok(completion)
        })
    }

    /// Fills the slot's buffers for a write of `data` and `metadata` (zeroes for none).
    fn stage_write(&self, data: &[u8], metadata: Option<&[u8]>, data_buffer: &mut [u8], metadata_buffer: &mut [u8]) {
        if self.format.extended {
            pack_extended(&self.format, data, metadata, data_buffer);
        } else {
            data_buffer.copy_from_slice(data);
            match metadata {
                Some(metadata) => metadata_buffer.copy_from_slice(metadata),
                None => metadata_buffer.fill(0),
            }
        }
    }

    fn lbas_of(&self, bytes: usize) -> u64 {
        bytes as u64 / self.format.lba_bytes as u64
    }

    /// LBAs of the next Read or Write command out of `remaining_lbas`.
    fn chunk_lbas(&self, remaining_lbas: u64) -> u64 {
        round_to_unit(remaining_lbas.min(self.limits.transfer_max_lbas), self.metadata_split_lbas)
    }

    /// One Zone Append command.
    fn append_once(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64> {
        let len_lbas = self.lbas_of(data.len());
        let start = self.geometry.zone_start_lba(zone);
        let completion = self
            .transfer_chunk(
                Command::zone_append(self.nsid, start, len_lbas),
                len_lbas,
                |data_buffer, metadata_buffer| self.stage_write(data, metadata, data_buffer, metadata_buffer),
                |_, _| {},
            )
            .map_err(|source| ZoneError::io("append", source))?;
        self.check(completion.res, Failed::new("append", zone, start, len_lbas))?;
        let lba = completion.result;
        if lba < start || lba + len_lbas > start + self.geometry.zone_capacity_lbas {
            return Err(ZoneError::io(
                "append",
                io::Error::other(format!(
                    "the device reported LBA {lba} for an append of {len_lbas} LBAs to zone {zone}"
                )),
            ));
        }
        Ok(lba)
    }
}

/// Failures of a report: of the ring (which at open means no uring_cmd), or of the
/// device.
enum Probe {
    Ring(io::Error),
    Zone(ZoneError),
}

impl From<Probe> for ZoneError {
    fn from(probe: Probe) -> ZoneError {
        match probe {
            Probe::Ring(source) => ZoneError::io("report", source),
            Probe::Zone(error) => error,
        }
    }
}

impl RawZoned for NvmeNamespace {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn report(&self, first_zone: u32, count: u32) -> Result<Vec<ZoneInfo>> {
        Ok(self.report_inner(first_zone, count)?)
    }

    fn read(&self, lba: u64, data: &mut [u8], mut metadata: Option<&mut [u8]>) -> Result<()> {
        let lba_bytes = self.format.lba_bytes as usize;
        let md = self.format.metadata_bytes as usize;
        let zone = self.geometry.zone_of(lba).unwrap_or(u32::MAX);
        let total_lbas = self.lbas_of(data.len());
        let mut done_lbas = 0;
        while done_lbas < total_lbas {
            let len_lbas = self.chunk_lbas(total_lbas - done_lbas);
            let at = lba + done_lbas;
            let range = done_lbas as usize..(done_lbas + len_lbas) as usize;
            let data_out = &mut data[range.start * lba_bytes..range.end * lba_bytes];
            let metadata_out = metadata.as_deref_mut().map(|m| &mut m[range.start * md..range.end * md]);
            let format = self.format;
            let completion = self
                .transfer_chunk(
                    Command::read(self.nsid, at, len_lbas),
                    len_lbas,
                    |_, _| {},
                    |data_buffer, metadata_buffer| {
                        if format.extended {
                            unpack_extended(&format, data_buffer, data_out, metadata_out);
                        } else {
                            data_out.copy_from_slice(data_buffer);
                            if let Some(metadata_out) = metadata_out {
                                metadata_out.copy_from_slice(metadata_buffer);
                            }
                        }
                    },
                )
                .map_err(|source| ZoneError::io("read", source))?;
            self.check(completion.res, Failed::new("read", zone, at, len_lbas))?;
            done_lbas += len_lbas;
        }
        Ok(())
    }

    fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> Result<()> {
        let lba_bytes = self.format.lba_bytes as usize;
        let md = self.format.metadata_bytes as usize;
        let zone = self.geometry.zone_of(lba).unwrap_or(u32::MAX);
        let total_lbas = self.lbas_of(data.len());
        let mut done_lbas = 0;
        // CheckedDevice holds the zone exclusively: the chunks go out in order.
        while done_lbas < total_lbas {
            let len_lbas = self.chunk_lbas(total_lbas - done_lbas);
            let at = lba + done_lbas;
            let range = done_lbas as usize..(done_lbas + len_lbas) as usize;
            let data_in = &data[range.start * lba_bytes..range.end * lba_bytes];
            let metadata_in = metadata.map(|m| &m[range.start * md..range.end * md]);
            let completion = self
                .transfer_chunk(
                    Command::write(self.nsid, at, len_lbas),
                    len_lbas,
                    |data_buffer, metadata_buffer| self.stage_write(data_in, metadata_in, data_buffer, metadata_buffer),
                    |_, _| {},
                )
                .map_err(|source| ZoneError::io("write", source))?;
            self.check(completion.res, Failed::new("write", zone, at, len_lbas))?;
            done_lbas += len_lbas;
        }
        Ok(())
    }

    fn has_native_append(&self) -> bool {
        true
    }

    fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> Result<u64> {
        let Some(unit) = self.metadata_split_lbas else {
            return self.append_once(zone, data, metadata);
        };
        let _serialized = self.append_locks[zone as usize].lock().unwrap_or_else(|p| p.into_inner());
        let len_lbas = self.lbas_of(data.len());
        if round_to_unit(len_lbas, Some(unit)) == len_lbas {
            return self.append_once(zone, data, metadata);
        }
        // Nothing else appends to the zone while the lock is held, and CheckedDevice
        // keeps writes out while appends run, so the tail lands right after the head.
        let head_lbas = round_to_unit(len_lbas, Some(unit));
        let head_bytes = (head_lbas * self.format.lba_bytes as u64) as usize;
        let head_metadata_bytes = (head_lbas * self.format.metadata_bytes as u64) as usize;
        let lba = self.append_once(zone, &data[..head_bytes], metadata.map(|m| &m[..head_metadata_bytes]))?;
        let tail = self.append_once(zone, &data[head_bytes..], metadata.map(|m| &m[head_metadata_bytes..]))?;
        if tail != lba + head_lbas {
            return Err(ZoneError::io(
                "append",
                io::Error::other(format!(
                    "a split append to zone {zone} landed apart (LBA {lba} and {tail}); is another process writing to the namespace?"
                )),
            ));
        }
        Ok(lba)
    }

    fn zone_op(&self, zone: u32, op: ZoneOp) -> Result<()> {
        let start = self.geometry.zone_start_lba(zone);
        let command = Command::zone_send(self.nsid, start, op);
        let completion = self
            .with_slot(|slot| slot.execute(self.fd(), &command, 0, 0))
            .map_err(|source| ZoneError::io("zone management", source))?;
        let failed = Failed { zone_op: Some(op), ..Failed::new("zone management", zone, start, 0) };
        self.check(completion.res, failed)
    }

    fn sync(&self) -> Result<()> {
        let command = Command::flush(self.nsid);
        let completion = self
            .with_slot(|slot| slot.execute(self.fd(), &command, 0, 0))
            .map_err(|source| ZoneError::io("flush", source))?;
        self.check(completion.res, Failed::new("flush", 0, 0, 0))
    }

    fn describe(&self) -> String {
        let format = &self.format;
        let metadata = match (format.metadata_bytes, format.extended) {
            (0, _) => String::new(),
            (md, true) => format!(" + {md} B extended (interleaved) metadata"),
            (md, false) => format!(" + {md} B separate metadata"),
        };
        let workaround = match self.metadata_split_lbas {
            Some(_) => ", QEMU metadata DMA workaround",
            None => "",
        };
        format!(
            "NVMe ZNS namespace {} (nsid {}, io_uring passthrough, {} B LBAs{metadata}{workaround})",
            self.path.display(),
            self.nsid,
            format.lba_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn uring_cmd_layout_matches_the_kernel() {
        assert_eq!(std::mem::size_of::<NvmeUringCmd>(), 72);
        let offsets = [
            (offset_of!(NvmeUringCmd, opcode), 0),
            (offset_of!(NvmeUringCmd, flags), 1),
            (offset_of!(NvmeUringCmd, rsvd1), 2),
            (offset_of!(NvmeUringCmd, nsid), 4),
            (offset_of!(NvmeUringCmd, cdw2), 8),
            (offset_of!(NvmeUringCmd, cdw3), 12),
            (offset_of!(NvmeUringCmd, metadata), 16),
            (offset_of!(NvmeUringCmd, addr), 24),
            (offset_of!(NvmeUringCmd, metadata_len), 32),
            (offset_of!(NvmeUringCmd, data_len), 36),
            (offset_of!(NvmeUringCmd, cdw10), 40),
            (offset_of!(NvmeUringCmd, cdw11), 44),
            (offset_of!(NvmeUringCmd, cdw12), 48),
            (offset_of!(NvmeUringCmd, cdw13), 52),
            (offset_of!(NvmeUringCmd, cdw14), 56),
            (offset_of!(NvmeUringCmd, cdw15), 60),
            (offset_of!(NvmeUringCmd, timeout_ms), 64),
            (offset_of!(NvmeUringCmd, rsvd2), 68),
        ];
        for (got, want) in offsets {
            assert_eq!(got, want);
        }
        assert_eq!(offset_of!(NvmePassthruCmd, result), 68);
        assert_eq!(offset_of!(NvmePassthruCmd, cdw10), 40);
    }

    #[test]
    fn ioctl_numbers() {
        assert_eq!(NVME_IOCTL_ID, 0x4E40);
        assert_eq!(NVME_IOCTL_ADMIN_CMD, 0xC048_4E41);
        assert_eq!(NVME_URING_CMD_IO, 0xC048_4E80);
    }

    #[test]
    fn sqe_cmd_bytes_are_the_struct_in_order() {
        let cmd = NvmeUringCmd {
            opcode: 0x7D,
            nsid: 3,
            metadata: 0x1122_3344_5566_7788,
            addr: 0xAABB_CCDD_0000_1000,
            metadata_len: 256,
            data_len: 65536,
            cdw10: 0x100,
            cdw12: 15,
            ..NvmeUringCmd::default()
        };
        let bytes = cmd.to_sqe_cmd();
        assert_eq!(bytes[0], 0x7D);
        assert_eq!(u32_at(&bytes, 4), 3);
        assert_eq!(u64_at(&bytes, 16), 0x1122_3344_5566_7788);
        assert_eq!(u64_at(&bytes, 24), 0xAABB_CCDD_0000_1000);
        assert_eq!(u32_at(&bytes, 32), 256);
        assert_eq!(u32_at(&bytes, 36), 65536);
        assert_eq!(u32_at(&bytes, 40), 0x100);
        assert_eq!(u32_at(&bytes, 48), 15);
        assert!(bytes[72..].iter().all(|&b| b == 0));
    }

    #[test]
    fn command_encoding() {
        let lba = 0x1_2345_6789;
        assert_eq!(Command::read(1, lba, 8), Command { opcode: 0x02, nsid: 1, cdw: [0x2345_6789, 1, 7, 0, 0, 0] });
        assert_eq!(Command::write(2, 4096, 1), Command { opcode: 0x01, nsid: 2, cdw: [4096, 0, 0, 0, 0, 0] });
        assert_eq!(
            Command::zone_append(1, 16384, 256),
            Command { opcode: 0x7D, nsid: 1, cdw: [16384, 0, 255, 0, 0, 0] }
        );
        let actions = [(ZoneOp::Close, 1), (ZoneOp::Finish, 2), (ZoneOp::Open, 3), (ZoneOp::Reset, 4)];
        for (op, zsa) in actions {
            assert_eq!(
                Command::zone_send(1, lba, op),
                Command { opcode: 0x79, nsid: 1, cdw: [0x2345_6789, 1, 0, zsa, 0, 0] },
                "{op}"
            );
        }
        // 64 B header + 2 descriptors = 192 B = 48 dwords, 0-based; partial report bit 16.
        assert_eq!(
            Command::report_zones(1, 32768, 192),
            Command { opcode: 0x7A, nsid: 1, cdw: [32768, 0, 47, 1 << 16, 0, 0] }
        );
        assert_eq!(Command::flush(5), Command { opcode: 0x00, nsid: 5, cdw: [0; 6] });
        assert_eq!(Command::identify(1, 0x05, 2), Command { opcode: 0x06, nsid: 1, cdw: [5, 2 << 24, 0, 0, 0, 0] });
        assert_eq!(Command::identify(0, 0x01, 0).cdw, [1, 0, 0, 0, 0, 0]);

        let mut data = vec![0u8; 8192];
        let mut metadata = vec![0u8; 32];
        let uring = Command::zone_append(1, 16384, 2).uring(&mut data, &mut metadata);
        assert_eq!((uring.opcode, uring.nsid, uring.cdw10, uring.cdw12), (0x7D, 1, 16384, 1));
        assert_eq!((uring.data_len, uring.metadata_len), (8192, 32));
        assert_eq!(uring.addr, data.as_ptr() as u64);
        assert_eq!(uring.metadata, metadata.as_ptr() as u64);
        let bare = Command::flush(1).uring(&mut [], &mut []);
        assert_eq!((bare.addr, bare.metadata, bare.data_len, bare.metadata_len), (0, 0, 0, 0));
    }

    fn geometry() -> Geometry {
        Geometry::from_bytes(4096, 16, 16, 64 << 20, 62 << 20, 14, 14, 4096).unwrap()
    }

    #[test]
    fn zns_statuses_map_to_zone_errors() {
        let g = geometry();
        let write = Failed::new("write", 2, g.zone_start_lba(2) + 8, 4);
        let map = |status: u32, failed: &Failed| status_error(status, failed, &g);
        assert!(matches!(map(0x1B9, &write), ZoneError::ZoneFull { zone: 2 }));
        assert!(matches!(map(0x1BA, &write), ZoneError::ZoneReadOnly { zone: 2 }));
        assert!(matches!(map(0x1BB, &write), ZoneError::ZoneOffline { zone: 2 }));
        assert!(matches!(map(0x1BD, &write), ZoneError::TooManyActiveZones { zone: 2, max_active: 14 }));
        assert!(matches!(map(0x1BE, &write), ZoneError::TooManyOpenZones { zone: 2, max_open: 14 }));
        assert!(matches!(
            map(0x1B8, &write),
            ZoneError::ExceedsCapacity { zone: 2, offset_lbas: 8, len_bytes: 16384, capacity_lbas: 15872 }
        ));
        let read = Failed::new("read", 2, 100, 4);
        assert!(matches!(map(0x1B8, &read), ZoneError::CrossesZoneCapacity { zone: 2, lba: 100, end: 104 }));
        let known = Failed { write_pointer_lba: Some(g.zone_start_lba(2)), ..write };
        assert!(
            matches!(map(0x1BC, &known), ZoneError::NotAtWritePointer { zone: 2, write_pointer, .. } if write_pointer == g.zone_start_lba(2))
        );
        // DNR (bit 14) and More (bit 13) do not change the code.
        assert!(matches!(map(0x4000 | 0x2000 | 0x1B9, &write), ZoneError::ZoneFull { zone: 2 }));
        let open = Failed {
            zone_op: Some(ZoneOp::Open),
            condition: Some(ZoneCondition::Full),
            ..Failed::new("zone management", 2, 0, 0)
        };
        assert!(matches!(
            map(0x1BF, &open),
            ZoneError::InvalidTransition { zone: 2, op: ZoneOp::Open, condition: ZoneCondition::Full }
        ));
        // Without the zone's condition the transition error stays an I/O error naming it.
        let message = map(0x1BF, &write).to_string();
        assert!(message.contains("Invalid Zone State Transition"), "{message}");
        assert!(matches!(map(0x080, &read), ZoneError::LbaOutOfRange { lba: 100, .. }));
        let other = map(0x4281, &read);
        assert!(other.is_device_failure());
        let message = other.to_string();
        assert!(
            message.contains("0x281") && message.contains("Unrecovered Read Error") && message.contains("do not retry"),
            "{message}"
        );
    }

    fn descriptor(report: &mut [u8], index: usize, state: u8, zcap: u64, zslba: u64, wp: u64) {
        let d = &mut report[64 + 64 * index..][..64];
        d[0] = 0x2;
        d[1] = state << 4;
        d[8..16].copy_from_slice(&zcap.to_le_bytes());
        d[16..24].copy_from_slice(&zslba.to_le_bytes());
        d[24..32].copy_from_slice(&wp.to_le_bytes());
    }

    #[test]
    fn zone_descriptors_parse() {
        let size = 8192;
        let mut report = vec![0u8; 64 + 64 * 5];
        report[..8].copy_from_slice(&4u64.to_le_bytes());
        descriptor(&mut report, 0, 0x1, 6912, 3 * size, 3 * size);
        descriptor(&mut report, 1, 0x2, 6912, 4 * size, 4 * size + 17);
        descriptor(&mut report, 2, 0xE, 6912, 5 * size, u64::MAX);
        descriptor(&mut report, 3, 0x4, 6912, 6 * size, 6 * size + 6912);
        let zones = parse_zone_report(&report, 3, size, 10).unwrap();
        assert_eq!(zones.len(), 4, "the header's count, not the buffer size, bounds the zones");
        assert_eq!(
            zones[0],
            ZoneInfo {
                zone: 3,
                start_lba: 3 * size,
                len_lbas: size,
                capacity_lbas: 6912,
                write_pointer_lba: 3 * size,
                condition: ZoneCondition::Empty
            }
        );
        assert_eq!((zones[1].condition, zones[1].write_pointer_lba), (ZoneCondition::ImplicitlyOpened, 4 * size + 17));
        assert_eq!(zones[2].condition, ZoneCondition::Full);
        assert_eq!(zones[2].write_pointer_lba, 6 * size, "a full zone's write pointer is its end (Linux convention)");
        assert_eq!(zones[3].condition, ZoneCondition::Closed);
        assert_eq!(parse_zone_report(&report, 3, size, 2).unwrap().len(), 2);
        assert!(parse_zone_report(&report, 4, size, 10).unwrap_err().contains("starts at LBA"));
        report[64 + 1] = 0x7 << 4;
        assert!(parse_zone_report(&report, 3, size, 10).unwrap_err().contains("unknown state"));
    }

    #[test]
    fn extended_lba_round_trip() {
        for (lba_bytes, md) in [(4096u32, 64u32), (512, 8), (4096, 16)] {
            let format = Format { lba_bytes, metadata_bytes: md, extended: true };
            let lbas = 5;
            let data: Vec<u8> = (0..lbas * lba_bytes as usize).map(|i| (i * 7 + 1) as u8).collect();
            let metadata: Vec<u8> = (0..lbas * md as usize).map(|i| (i * 13 + 5) as u8).collect();
            let mut packed = vec![0xFFu8; lbas * (lba_bytes + md) as usize];
            pack_extended(&format, &data, Some(&metadata), &mut packed);
            // LBA 1's metadata sits right after LBA 1's data.
            let second = (lba_bytes + md) as usize;
            assert_eq!(packed[second..second + lba_bytes as usize], data[lba_bytes as usize..2 * lba_bytes as usize]);
            assert_eq!(packed[second + lba_bytes as usize..2 * second], metadata[md as usize..2 * md as usize]);
            let (mut data_back, mut metadata_back) = (vec![0u8; data.len()], vec![0u8; metadata.len()]);
            unpack_extended(&format, &packed, &mut data_back, Some(&mut metadata_back));
            assert_eq!((data_back, metadata_back), (data.clone(), metadata));
            pack_extended(&format, &data, None, &mut packed);
            let mut metadata_back = vec![0xFFu8; lbas * md as usize];
            unpack_extended(&format, &packed, &mut vec![0u8; data.len()], Some(&mut metadata_back));
            assert!(metadata_back.iter().all(|&b| b == 0), "no metadata writes zeroes");
        }
    }

    fn identify_namespace(nsze: u64, flbas: u8, formats: &[(u16, u8)], dps: u8) -> Vec<u8> {
        let mut data = vec![0u8; 4096];
        data[..8].copy_from_slice(&nsze.to_le_bytes());
        data[25] = formats.len() as u8 - 1;
        data[26] = flbas;
        data[29] = dps;
        for (index, &(ms, lbads)) in formats.iter().enumerate() {
            let lbaf = ms as u32 | (lbads as u32) << 16;
            data[128 + 4 * index..][..4].copy_from_slice(&lbaf.to_le_bytes());
        }
        data
    }

    #[test]
    fn identify_data_parse() {
        let formats = [(0, 9), (8, 9), (16, 9), (64, 9), (0, 12), (8, 12), (16, 12), (64, 12)];
        let separate = parse_identify_namespace(&identify_namespace(1 << 18, 6, &formats, 0));
        assert_eq!(separate.lbaf_index, 6);
        assert_eq!(separate.lbaf, LbaFormat { metadata_bytes: 16, lbads: 12 });
        assert!(!separate.extended);
        assert_eq!(check_format(&separate).unwrap(), Format { lba_bytes: 4096, metadata_bytes: 16, extended: false });
        let extended = parse_identify_namespace(&identify_namespace(1 << 18, 0x10 | 7, &formats, 0));
        assert_eq!(check_format(&extended).unwrap(), Format { lba_bytes: 4096, metadata_bytes: 64, extended: true });
        let pi = parse_identify_namespace(&identify_namespace(1 << 18, 1, &formats, 1));
        assert!(check_format(&pi).unwrap_err().contains("protection information"));
        let odd_md = parse_identify_namespace(&identify_namespace(1 << 18, 0, &[(32, 12)], 0));
        assert!(check_format(&odd_md).unwrap_err().contains("32 B of metadata"));
        let odd_lba = parse_identify_namespace(&identify_namespace(1 << 18, 0, &[(0, 13)], 0));
        assert!(check_format(&odd_lba).unwrap_err().contains("8192 B"));

        let mut zns = vec![0u8; 4096];
        zns[4..8].copy_from_slice(&13u32.to_le_bytes());
        zns[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        zns[2816 + 16 * 6..][..8].copy_from_slice(&16384u64.to_le_bytes());
        assert_eq!(
            parse_zns_identify_namespace(&zns, 6),
            ZnsNamespace { mar: 13, mor: u32::MAX, zone_size_lbas: 16384 }
        );

        // EUI-64 (type 2, 8 bytes), then CSI (type 4, 1 byte).
        let mut list = vec![0u8; 4096];
        list[0] = 2;
        list[1] = 8;
        list[12] = 4;
        list[13] = 1;
        list[16] = 2;
        assert_eq!(parse_csi(&list), Some(2));
        assert_eq!(parse_csi(&vec![0u8; 4096]), None);
    }

    fn facts(format: Format, mor: u32, mar: u32, mdts: u8, zasl: u8) -> Facts {
        Facts {
            format,
            nsze: 16 * 16384,
            zns: ZnsNamespace { mar, mor, zone_size_lbas: 16384 },
            mdts,
            zasl,
            kernel_max_transfer_bytes: None,
            qemu_metadata_dma_bug: false,
        }
    }

    fn identify_controller(vendor: u16, firmware: &str) -> Vec<u8> {
        let mut data = vec![0u8; 4096];
        data[..2].copy_from_slice(&vendor.to_le_bytes());
        data[64..72].copy_from_slice(format!("{firmware:<8}").as_bytes());
        data
    }

    #[test]
    fn qemu_metadata_workaround() {
        assert!(qemu_metadata_dma_bug(&identify_controller(0x1B36, "7.2.15")));
        assert!(qemu_metadata_dma_bug(&identify_controller(0x1B36, "8.2.2")));
        assert!(qemu_metadata_dma_bug(&identify_controller(0x1B36, "")), "an unknown QEMU is assumed buggy");
        assert!(!qemu_metadata_dma_bug(&identify_controller(0x1B36, "9.0.0")));
        assert!(!qemu_metadata_dma_bug(&identify_controller(0x144D, "7.2.15")), "only QEMU's controller");

        let separate = Format { lba_bytes: 4096, metadata_bytes: 16, extended: false };
        let extended = Format { lba_bytes: 4096, metadata_bytes: 64, extended: true };
        let plain = Format { lba_bytes: 4096, metadata_bytes: 0, extended: false };
        let quirky = |format| Facts { qemu_metadata_dma_bug: true, ..facts(format, 13, 13, 7, 0) };
        assert_eq!(metadata_split_lbas(&quirky(separate)), Some(32));
        assert_eq!(metadata_split_lbas(&quirky(extended)), Some(8));
        assert_eq!(metadata_split_lbas(&quirky(plain)), None, "no metadata, nothing to protect");
        assert_eq!(metadata_split_lbas(&facts(separate, 13, 13, 7, 0)), None);
        // Every command moves at most 512 B of metadata, or a multiple of 512 B.
        let limits = derive_limits(&quirky(extended), 15872);
        assert_eq!(limits.transfer_max_lbas, 120, "126 LBAs of 4160 B fit 512 KiB; 120 is the multiple of 8");
        assert_eq!(limits.append_max_bytes, 120 * 4096);
        assert_eq!(derive_limits(&quirky(separate), 15872).append_max_bytes, 512 << 10);
        for lbas in [1, 8, 9, 31, 32, 33, 100, 128, 1000] {
            let chunk = round_to_unit(lbas, Some(32));
            assert!(chunk * 16 <= 512 || chunk * 16 % 512 == 0, "{lbas} -> {chunk}");
            assert!(chunk >= 1 && chunk <= lbas && (lbas <= 32 || lbas - chunk < 32));
        }
    }

    #[test]
    fn geometry_from_identify() {
        let separate = Format { lba_bytes: 4096, metadata_bytes: 16, extended: false };
        // QEMU's defaults: MDTS 7 (512 KiB), ZASL 0 (as MDTS), limits 0-based.
        let g = derive_geometry(&facts(separate, 13, 13, 7, 0), 15872).unwrap();
        assert_eq!((g.zone_count, g.zone_size_lbas, g.zone_capacity_lbas), (16, 16384, 15872));
        assert_eq!((g.max_open_zones, g.max_active_zones, g.metadata_bytes), (14, 14, 16));
        assert_eq!((g.write_granularity_bytes, g.zone_append_max_bytes), (4096, 512 << 10));
        // No limits; MDTS 0 (none) caps at 1 MiB; ZASL 5 = 128 KiB.
        let g = derive_geometry(&facts(separate, u32::MAX, u32::MAX, 0, 0), 15872).unwrap();
        assert_eq!((g.max_open_zones, g.max_active_zones, g.zone_append_max_bytes), (0, 0, 1 << 20));
        let g = derive_geometry(&facts(separate, u32::MAX, 7, 0, 5), 15872).unwrap();
        assert_eq!((g.max_open_zones, g.max_active_zones, g.zone_append_max_bytes), (8, 8, 128 << 10));
        // Limits above the zone count are clamped.
        let g = derive_geometry(&facts(separate, 99, 99, 7, 0), 15872).unwrap();
        assert_eq!((g.max_open_zones, g.max_active_zones), (16, 16));
        // Extended LBAs: the metadata counts against MDTS.
        let extended = Format { lba_bytes: 4096, metadata_bytes: 64, extended: true };
        let facts_ext = facts(extended, 13, 13, 7, 0);
        let limits = derive_limits(&facts_ext, 15872);
        assert_eq!(limits.transfer_max_lbas, (512 << 10) / 4160);
        assert_eq!(limits.append_max_bytes as u64, (512 << 10) / 4160 * 4096);
        derive_geometry(&facts_ext, 15872).unwrap().validate().unwrap();
        // The kernel's limit (127 segments of a page on Linux 6.1) caps MDTS's 512 KiB.
        assert_eq!(transfer_limit_bytes(7, Some(127 * 4096)), 127 * 4096);
        assert_eq!(transfer_limit_bytes(0, None), 1 << 20);
        assert_eq!(transfer_limit_bytes(5, Some(4 << 20)), 128 << 10);
        let kernel_capped = Facts { kernel_max_transfer_bytes: Some(127 * 4096), ..facts(separate, 13, 13, 7, 0) };
        assert_eq!(derive_geometry(&kernel_capped, 15872).unwrap().zone_append_max_bytes, 127 * 4096);
        // A namespace that is not a whole number of zones is refused.
        let mut bad = facts(separate, 13, 13, 7, 0);
        bad.nsze += 1;
        assert!(matches!(derive_geometry(&bad, 15872), Err(NvmeErrorKind::Format(_))));
    }

    #[test]
    fn opening_something_else_says_what_to_use() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let error = NvmeNamespace::open(file.path()).err().expect("a regular file is refused");
        assert!(matches!(error, NvmeError::NotCharDevice { kind: "regular file", .. }), "{error}");
        assert!(error.to_string().contains("/dev/ngXnY"));
        let error = NvmeNamespace::open(Path::new("/dev/null")).err().expect("/dev/null is refused");
        assert!(matches!(error, NvmeError::NotNvme { .. }), "{error}");
        let error = NvmeNamespace::open(Path::new("/nonexistent/ng0n1")).err().expect("a missing path is refused");
        assert!(matches!(error, NvmeError::Open { .. }), "{error}");
    }
}
