//! The file-backed emulated ZNS device: znswap's embedded default.
//!
//! A regular file (sparse) or a block device holds a header, a zone table, the per-LBA
//! metadata and the zones' data; `docs/device-file.md` draws the
//! bytes. The header and zone table (the *control area*, before `metadata_offset`) are
//! memory-mapped, so a write-pointer update costs a store rather than a system call. The
//! per-LBA metadata goes through `pread`/`pwrite` (buffered): mapped, the records a
//! swap-out writes (16 B a page) stayed resident in the process that drives the device,
//! the program itself under `znswap run`, growing with the device to 4 MiB per GiB of
//! it. The data goes through `pread`/`pwrite`, with `O_DIRECT` when the file system
//! accepts it, so the page cache does not flatter the figures.
//!
//! Close and reopen keep every zone's condition, write pointer, data, metadata and
//! counters; zones that were open come back Closed, as after a power cycle. The file is
//! locked (`flock`) while open, so two processes never drive one device.

use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::device::ZoneCounterCells;
use crate::direct_io::{self, DIRECT_ALIGN};
use crate::emulated::{EmulatedDevice, Storage};
use crate::geometry::{Geometry, GeometryError};
use crate::zone::{ZoneCondition, ZoneState, ZoneTable};

/// An emulated ZNS device stored in a file or block device.
pub type FileDevice = EmulatedDevice<FileStorage>;

pub const MAGIC: [u8; 8] = *b"ZNSWAPDV";
pub const FORMAT_VERSION: u32 = 1;
pub const HEADER_BYTES: u64 = 4096;

// Header field offsets (docs/device-file.md).
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_CHECKSUM: usize = 12;
const OFF_LBA_BYTES: usize = 16;
const OFF_METADATA_BYTES: usize = 20;
const OFF_ZONE_COUNT: usize = 24;
const OFF_MAX_OPEN: usize = 28;
const OFF_MAX_ACTIVE: usize = 32;
const OFF_WRITE_GRANULARITY: usize = 36;
const OFF_ZONE_APPEND_MAX: usize = 40;
const OFF_ZONE_SIZE_LBAS: usize = 48;
const OFF_ZONE_CAPACITY_LBAS: usize = 56;
const OFF_ZONE_TABLE: usize = 64;
const OFF_METADATA: usize = 72;
const OFF_DATA: usize = 80;
const OFF_FILE_BYTES: usize = 88;

/// A zone table entry: 16 little-endian u64 words.
pub const ZONE_ENTRY_BYTES: u64 = 128;
const WORD_CONDITION: usize = 0;
const WORD_WRITE_POINTER: usize = 1;
/// Words 2..9 hold the counters in `ZoneCounterCells::cells()` order.
const WORD_COUNTERS: usize = 2;
const ZONE_ENTRY_WORDS: usize = (ZONE_ENTRY_BYTES / 8) as usize;

/// Data starts on a 1 MiB boundary so O_DIRECT and large pages line up.
const DATA_ALIGN: u64 = 1 << 20;

/// Why a device file could not be created or opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileDeviceError {
    #[error("{path}: {op} failed: {source}")]
    Io { path: PathBuf, op: &'static str, source: std::io::Error },
    #[error("{path} exists and is not empty; pass --force to overwrite it (its contents will be lost)")]
    Exists { path: PathBuf },
    #[error("{path} is not a znswap device file (no ZNSWAPDV header); create one with `znswap device create --device {path} ...`")]
    NotADevice { path: PathBuf },
    #[error("{path} has device format version {found}, this build reads version {supported}; recreate it with `znswap device create --force`")]
    UnsupportedVersion { path: PathBuf, found: u32, supported: u32 },
    #[error(
        "{path}: the device header is corrupt (checksum mismatch); recreate it with `znswap device create --force`"
    )]
    CorruptHeader { path: PathBuf },
    #[error("{path}: zone {zone} of the zone table is corrupt ({reason}); recreate the device with `znswap device create --force`")]
    CorruptZone { path: PathBuf, zone: u32, reason: String },
    #[error("{path}: the device has {field} = {found}, but {expected} was asked for; use the device's geometry or recreate it")]
    GeometryMismatch { path: PathBuf, field: &'static str, expected: String, found: String },
    #[error("{path} holds {len} B, but the geometry needs {needed} B")]
    TooSmall { path: PathBuf, len: u64, needed: u64 },
    #[error("{path} is in use by another process (it is locked)")]
    Locked { path: PathBuf },
    #[error(transparent)]
    Geometry(#[from] GeometryError),
}

type Result<T> = std::result::Result<T, FileDeviceError>;

/// Where each region of the file starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub zone_table_offset: u64,
    pub metadata_offset: u64,
    pub data_offset: u64,
    pub file_bytes: u64,
}

fn round_up(value: u64, to: u64) -> u64 {
    value.div_ceil(to) * to
}

impl Layout {
    pub fn for_geometry(geometry: &Geometry) -> Layout {
        let zones = geometry.zone_count as u64;
        let zone_table_offset = HEADER_BYTES;
        let metadata_offset = round_up(zone_table_offset + zones * ZONE_ENTRY_BYTES, 4096);
        let metadata_bytes = zones * geometry.zone_capacity_lbas * geometry.metadata_bytes as u64;
        let data_offset = round_up(metadata_offset + metadata_bytes, DATA_ALIGN);
        let file_bytes = data_offset + zones * geometry.zone_size_bytes();
        Layout { zone_table_offset, metadata_offset, data_offset, file_bytes }
    }
}

fn encode_header(geometry: &Geometry, layout: &Layout) -> Vec<u8> {
    let mut header = vec![0u8; HEADER_BYTES as usize];
    let mut put32 = |offset: usize, value: u32| header[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
    put32(OFF_VERSION, FORMAT_VERSION);
    put32(OFF_LBA_BYTES, geometry.lba_bytes);
    put32(OFF_METADATA_BYTES, geometry.metadata_bytes);
    put32(OFF_ZONE_COUNT, geometry.zone_count);
    put32(OFF_MAX_OPEN, geometry.max_open_zones);
    put32(OFF_MAX_ACTIVE, geometry.max_active_zones);
    put32(OFF_WRITE_GRANULARITY, geometry.write_granularity_bytes);
    put32(OFF_ZONE_APPEND_MAX, geometry.zone_append_max_bytes);
    let mut put64 = |offset: usize, value: u64| header[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
    put64(OFF_ZONE_SIZE_LBAS, geometry.zone_size_lbas);
    put64(OFF_ZONE_CAPACITY_LBAS, geometry.zone_capacity_lbas);
    put64(OFF_ZONE_TABLE, layout.zone_table_offset);
    put64(OFF_METADATA, layout.metadata_offset);
    put64(OFF_DATA, layout.data_offset);
    put64(OFF_FILE_BYTES, layout.file_bytes);
    header[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(&MAGIC);
    let checksum = crc32c::crc32c(&header);
    header[OFF_CHECKSUM..OFF_CHECKSUM + 4].copy_from_slice(&checksum.to_le_bytes());
    header
}

fn decode_header(path: &Path, header: &[u8]) -> Result<(Geometry, Layout)> {
    let get32 = |offset: usize| u32::from_le_bytes(header[offset..offset + 4].try_into().unwrap());
    let get64 = |offset: usize| u64::from_le_bytes(header[offset..offset + 8].try_into().unwrap());
    if header[OFF_MAGIC..OFF_MAGIC + 8] != MAGIC {
        return Err(FileDeviceError::NotADevice { path: path.into() });
    }
    let version = get32(OFF_VERSION);
    if version != FORMAT_VERSION {
        return Err(FileDeviceError::UnsupportedVersion {
            path: path.into(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let mut zeroed = header.to_vec();
    zeroed[OFF_CHECKSUM..OFF_CHECKSUM + 4].fill(0);
    if crc32c::crc32c(&zeroed) != get32(OFF_CHECKSUM) {
        return Err(FileDeviceError::CorruptHeader { path: path.into() });
    }
    let geometry = Geometry {
        lba_bytes: get32(OFF_LBA_BYTES),
        metadata_bytes: get32(OFF_METADATA_BYTES),
        zone_count: get32(OFF_ZONE_COUNT),
        zone_size_lbas: get64(OFF_ZONE_SIZE_LBAS),
        zone_capacity_lbas: get64(OFF_ZONE_CAPACITY_LBAS),
        max_open_zones: get32(OFF_MAX_OPEN),
        max_active_zones: get32(OFF_MAX_ACTIVE),
        write_granularity_bytes: get32(OFF_WRITE_GRANULARITY),
        zone_append_max_bytes: get32(OFF_ZONE_APPEND_MAX),
    };
    geometry.validate()?;
    let layout = Layout {
        zone_table_offset: get64(OFF_ZONE_TABLE),
        metadata_offset: get64(OFF_METADATA),
        data_offset: get64(OFF_DATA),
        file_bytes: get64(OFF_FILE_BYTES),
    };
    if layout != Layout::for_geometry(&geometry) {
        return Err(FileDeviceError::CorruptHeader { path: path.into() });
    }
    Ok((geometry, layout))
}

/// A shared, writable mapping of the control area.
struct ControlMap {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping lives as long as the struct; all access goes through atomics.
unsafe impl Send for ControlMap {}
unsafe impl Sync for ControlMap {}

impl ControlMap {
    fn new(file: &File, len: usize, path: &Path) -> Result<ControlMap> {
        // SAFETY: a fresh shared mapping of a file we hold open; checked for failure.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(FileDeviceError::Io { path: path.into(), op: "mmap", source: std::io::Error::last_os_error() });
        }
        Ok(ControlMap { base: base.cast(), len })
    }

    /// Word `index` of the zone table, viewed atomically.
    fn word(&self, byte_offset: u64) -> &AtomicU64 {
        assert!(byte_offset % 8 == 0 && byte_offset as usize + 8 <= self.len);
        // SAFETY: in bounds, 8-byte aligned (the map is page aligned), only ever accessed
        // atomically.
        unsafe { &*(self.base.add(byte_offset as usize) as *const AtomicU64) }
    }

    fn sync(&self) -> std::io::Result<()> {
        // SAFETY: the range is exactly our mapping.
        if unsafe { libc::msync(self.base.cast(), self.len, libc::MS_SYNC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for ControlMap {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping we created; nothing borrows it past drop.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

pub struct FileStorage {
    path: PathBuf,
    geometry: Geometry,
    layout: Layout,
    buffered: File,
    direct: Option<File>,
    /// Set when the file system refused an O_DIRECT transfer; buffered I/O from then on.
    direct_refused: AtomicBool,
    /// Reads wait on a device (`direct_io::reads_wait`).
    reads_wait: bool,
    control: ControlMap,
}

impl FileStorage {
    fn zone_entry_offset(&self, zone: u32) -> u64 {
        self.layout.zone_table_offset + zone as u64 * ZONE_ENTRY_BYTES
    }

    fn data_offset(&self, zone: u32, offset_lbas: u64) -> u64 {
        self.layout.data_offset
            + zone as u64 * self.geometry.zone_size_bytes()
            + offset_lbas * self.geometry.lba_bytes as u64
    }

    fn metadata_offset(&self, zone: u32, offset_lbas: u64) -> u64 {
        let lba_index = zone as u64 * self.geometry.zone_capacity_lbas + offset_lbas;
        self.layout.metadata_offset + lba_index * self.geometry.metadata_bytes as u64
    }

    fn direct_file(&self) -> Option<&File> {
        self.direct.as_ref().filter(|_| !self.direct_refused.load(Relaxed))
    }

    /// Runs `direct` on the O_DIRECT descriptor; on EINVAL (the file system refuses the
    /// alignment) falls back to buffered I/O for good.
    fn with_direct<T>(
        &self,
        direct: impl FnOnce(&File) -> std::io::Result<T>,
        buffered: impl FnOnce(&File) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        if let Some(file) = self.direct_file() {
            match direct(file) {
                Err(error) if error.raw_os_error() == Some(libc::EINVAL) => self.direct_refused.store(true, Relaxed),
                other => return other,
            }
        }
        buffered(&self.buffered)
    }

    pub fn is_direct(&self) -> bool {
        self.direct_file().is_some()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Storage for FileStorage {
    fn write_data(&self, zone: u32, offset_lbas: u64, data: &[u8]) -> std::io::Result<()> {
        let position = self.data_offset(zone, offset_lbas);
        self.with_direct(|file| direct_io::write_at(file, data, position), |file| file.write_all_at(data, position))
    }

    fn write_data_vectored(&self, zone: u32, offset_lbas: u64, data: &[IoSlice<'_>]) -> std::io::Result<()> {
        let position = self.data_offset(zone, offset_lbas);
        self.with_direct(
            |file| direct_io::write_vectored_at(file, data, position, true),
            |file| direct_io::write_vectored_at(file, data, position, false),
        )
    }

    fn read_data(&self, zone: u32, offset_lbas: u64, data: &mut [u8]) -> std::io::Result<()> {
        let position = self.data_offset(zone, offset_lbas);
        if let Some(file) = self.direct_file() {
            match direct_io::read_at(file, data, position, self.reads_wait) {
                Err(error) if error.raw_os_error() == Some(libc::EINVAL) => self.direct_refused.store(true, Relaxed),
                other => return other,
            }
        }
        self.buffered.read_exact_at(data, position)
    }

    fn write_metadata(
        &self,
        zone: u32,
        offset_lbas: u64,
        len_lbas: u64,
        metadata: Option<&[u8]>,
    ) -> std::io::Result<()> {
        let position = self.metadata_offset(zone, offset_lbas);
        match metadata {
            Some(metadata) => self.buffered.write_all_at(metadata, position),
            None => {
                static ZEROES: [u8; 4096] = [0; 4096];
                let len = len_lbas * self.geometry.metadata_bytes as u64;
                let mut done = 0;
                while done < len {
                    let piece = (len - done).min(ZEROES.len() as u64);
                    self.buffered.write_all_at(&ZEROES[..piece as usize], position + done)?;
                    done += piece;
                }
                Ok(())
            }
        }
    }

    fn read_metadata(&self, zone: u32, offset_lbas: u64, metadata: &mut [u8]) -> std::io::Result<()> {
        self.buffered.read_exact_at(metadata, self.metadata_offset(zone, offset_lbas))
    }

    fn persist_zone(&self, zone: u32, state: ZoneState) {
        let entry = self.zone_entry_offset(zone);
        self.control.word(entry + 8 * WORD_CONDITION as u64).store(state.condition.code() as u64, Relaxed);
        self.control.word(entry + 8 * WORD_WRITE_POINTER as u64).store(state.write_pointer_lbas, Relaxed);
    }

    fn persist_counters(&self, zone: u32, counters: [u64; 7]) {
        let entry = self.zone_entry_offset(zone);
        for (index, value) in counters.into_iter().enumerate() {
            self.control.word(entry + 8 * (WORD_COUNTERS + index) as u64).store(value, Relaxed);
        }
    }

    fn sync(&self) -> std::io::Result<()> {
        self.control.sync()?;
        self.buffered.sync_data()
    }

    fn describe(&self) -> String {
        let mode = if self.is_direct() { "O_DIRECT" } else { "buffered" };
        format!("file {} ({mode})", self.path.display())
    }
}

/// How to create a device file.
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateOptions {
    /// Overwrite a non-empty file (or a block device's contents).
    pub force: bool,
}

fn io_error<'p>(path: &'p Path, op: &'static str) -> impl FnOnce(std::io::Error) -> FileDeviceError + 'p {
    move |source| FileDeviceError::Io { path: path.into(), op, source }
}

fn lock_exclusive(file: &File, path: &Path) -> Result<()> {
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let error = std::io::Error::last_os_error();
        return Err(if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
            FileDeviceError::Locked { path: path.into() }
        } else {
            FileDeviceError::Io { path: path.into(), op: "flock", source: error }
        });
    }
    Ok(())
}

fn storage_len(file: &mut File, path: &Path) -> Result<u64> {
    file.seek(SeekFrom::End(0)).map_err(io_error(path, "seek"))
}

impl FileDevice {
    /// Creates a device at `path` (a new or empty regular file, or a block device) with
    /// every zone Empty.
    pub fn create(path: impl AsRef<Path>, geometry: Geometry, options: CreateOptions) -> Result<FileDevice> {
        let path = path.as_ref();
        geometry.validate()?;
        let layout = Layout::for_geometry(&geometry);
        let is_block = std::fs::metadata(path).map(|m| m.file_type().is_block_device()).unwrap_or(false);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(!is_block)
            .truncate(false)
            .open(path)
            .map_err(io_error(path, "create"))?;
        lock_exclusive(&file, path)?;
        let existing = storage_len(&mut file, path)?;
        if is_block {
            if existing < layout.file_bytes {
                return Err(FileDeviceError::TooSmall { path: path.into(), len: existing, needed: layout.file_bytes });
            }
            let mut magic = [0u8; 8];
            let _ = file.read_exact_at(&mut magic, 0);
            if magic == MAGIC && !options.force {
                return Err(FileDeviceError::Exists { path: path.into() });
            }
        } else {
            if existing > 0 && !options.force {
                return Err(FileDeviceError::Exists { path: path.into() });
            }
            file.set_len(0).map_err(io_error(path, "truncate"))?;
            file.set_len(layout.file_bytes).map_err(io_error(path, "set length"))?;
        }
        // Every zone entry is written below. Metadata needs no zeroing: only LBAs below a
        // write pointer are ever read back, and every write stores their metadata.
        let table = ZoneTable::new(geometry);
        let device = Self::assemble(path, file, geometry, layout, table, true)?;
        for zone in 0..geometry.zone_count {
            device.storage.persist_zone(zone, ZoneState::EMPTY);
        }
        // The header goes last: a file whose creation was interrupted has no valid header.
        device
            .storage
            .buffered
            .write_all_at(&encode_header(&geometry, &layout), 0)
            .map_err(io_error(path, "write header"))?;
        device.storage.sync().map_err(io_error(path, "sync"))?;
        Ok(device)
    }

    /// Opens an existing device file with whatever geometry it was created with.
    pub fn open(path: impl AsRef<Path>) -> Result<FileDevice> {
        let path = path.as_ref();
        let mut file = OpenOptions::new().read(true).write(true).open(path).map_err(io_error(path, "open"))?;
        let len = storage_len(&mut file, path)?;
        if len < HEADER_BYTES {
            return Err(FileDeviceError::NotADevice { path: path.into() });
        }
        let mut header = vec![0u8; HEADER_BYTES as usize];
        file.read_exact_at(&mut header, 0).map_err(io_error(path, "read header"))?;
        let (geometry, layout) = decode_header(path, &header)?;
        if len < layout.file_bytes {
            return Err(FileDeviceError::TooSmall { path: path.into(), len, needed: layout.file_bytes });
        }
        lock_exclusive(&file, path)?;
        let placeholder = ZoneTable::new(geometry);
        let device = Self::assemble(path, file, geometry, layout, placeholder, false)?;
        Ok(device)
    }

    /// Opens a device file and checks it has `expected` geometry.
    pub fn open_expecting(path: impl AsRef<Path>, expected: &Geometry) -> Result<FileDevice> {
        let path = path.as_ref();
        let device = Self::open(path)?;
        let found = device.storage.geometry;
        let fields: [(&'static str, u64, u64); 9] = [
            ("lba-size", expected.lba_bytes as u64, found.lba_bytes as u64),
            ("metadata-bytes", expected.metadata_bytes as u64, found.metadata_bytes as u64),
            ("zones", expected.zone_count as u64, found.zone_count as u64),
            ("zone-size (LBAs)", expected.zone_size_lbas, found.zone_size_lbas),
            ("zone-capacity (LBAs)", expected.zone_capacity_lbas, found.zone_capacity_lbas),
            ("max-open", expected.max_open_zones as u64, found.max_open_zones as u64),
            ("max-active", expected.max_active_zones as u64, found.max_active_zones as u64),
            ("write-granularity", expected.write_granularity_bytes as u64, found.write_granularity_bytes as u64),
            ("zone-append-max", expected.zone_append_max_bytes as u64, found.zone_append_max_bytes as u64),
        ];
        for (field, expected, found) in fields {
            if expected != found {
                return Err(FileDeviceError::GeometryMismatch {
                    path: path.into(),
                    field,
                    expected: expected.to_string(),
                    found: found.to_string(),
                });
            }
        }
        Ok(device)
    }

    /// Opens `path` if it is a device file, or creates it with `geometry` if it does not
    /// exist (or is empty). An existing device keeps its own geometry.
    pub fn open_or_create(path: impl AsRef<Path>, geometry: Geometry) -> Result<FileDevice> {
        let path = path.as_ref();
        match std::fs::metadata(path) {
            Ok(meta) if meta.len() > 0 || meta.file_type().is_block_device() => Self::open(path),
            _ => {
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(io_error(parent, "create directory"))?;
                }
                Self::create(path, geometry, CreateOptions::default())
            }
        }
    }

    fn assemble(
        path: &Path,
        file: File,
        geometry: Geometry,
        layout: Layout,
        table: ZoneTable,
        fresh: bool,
    ) -> Result<FileDevice> {
        // Sub-4 KiB LBAs would need the file system's sector size; keep those buffered.
        let direct = if geometry.lba_bytes as usize % DIRECT_ALIGN == 0 {
            OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(path).ok()
        } else {
            None
        };
        let control = ControlMap::new(&file, layout.metadata_offset as usize, path)?;
        let reads_wait = direct_io::reads_wait(&file);
        let storage = FileStorage {
            path: path.into(),
            geometry,
            layout,
            buffered: file,
            direct,
            direct_refused: AtomicBool::new(false),
            reads_wait,
            control,
        };
        let counters: Box<[ZoneCounterCells]> = (0..geometry.zone_count).map(|_| ZoneCounterCells::default()).collect();
        let table = if fresh {
            table
        } else {
            let mut states = Vec::with_capacity(geometry.zone_count as usize);
            for zone in 0..geometry.zone_count {
                let entry = storage.zone_entry_offset(zone);
                let code = storage.control.word(entry + 8 * WORD_CONDITION as u64).load(Relaxed);
                let write_pointer_lbas = storage.control.word(entry + 8 * WORD_WRITE_POINTER as u64).load(Relaxed);
                let corrupt = |reason: String| FileDeviceError::CorruptZone { path: path.into(), zone, reason };
                let condition = u8::try_from(code)
                    .ok()
                    .and_then(ZoneCondition::from_code)
                    .ok_or_else(|| corrupt(format!("unknown condition code {code:#x}")))?;
                if write_pointer_lbas > geometry.zone_capacity_lbas {
                    return Err(corrupt(format!(
                        "write pointer {write_pointer_lbas} past capacity {}",
                        geometry.zone_capacity_lbas
                    )));
                }
                if condition == ZoneCondition::Empty && write_pointer_lbas != 0 {
                    return Err(corrupt(format!("empty zone with write pointer {write_pointer_lbas}")));
                }
                for (index, cell) in counters[zone as usize].cells().into_iter().enumerate() {
                    cell.store(storage.control.word(entry + 8 * (WORD_COUNTERS + index) as u64).load(Relaxed), Relaxed);
                }
                states.push(ZoneState { condition, write_pointer_lbas });
            }
            let table = ZoneTable::restore(geometry, states);
            for zone in 0..geometry.zone_count {
                storage.persist_zone(zone, table.state(zone));
            }
            table
        };
        debug_assert_eq!(ZONE_ENTRY_WORDS, 16);
        Ok(EmulatedDevice::with_storage(table, counters, storage))
    }

    pub fn path(&self) -> &Path {
        self.storage.path()
    }

    /// True while data transfers bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.storage.is_direct()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_detects_damage() {
        let geometry = Geometry::from_bytes(4096, 16, 5, 3 << 20, 2 << 20, 3, 4, 4096).unwrap();
        let layout = Layout::for_geometry(&geometry);
        let header = encode_header(&geometry, &layout);
        let path = Path::new("x");
        assert_eq!(decode_header(path, &header).unwrap(), (geometry, layout));
        let mut damaged = header.clone();
        damaged[OFF_ZONE_COUNT] ^= 1;
        assert!(matches!(decode_header(path, &damaged), Err(FileDeviceError::CorruptHeader { .. })));
        let mut foreign = header.clone();
        foreign[0] = b'X';
        assert!(matches!(decode_header(path, &foreign), Err(FileDeviceError::NotADevice { .. })));
        let mut newer = header;
        newer[OFF_VERSION] = 9;
        assert!(matches!(decode_header(path, &newer), Err(FileDeviceError::UnsupportedVersion { found: 9, .. })));
    }

    #[test]
    fn layout_aligns_data() {
        let geometry = Geometry::from_bytes(512, 64, 7, 3 << 20, 1 << 20, 0, 0, 512).unwrap();
        let layout = Layout::for_geometry(&geometry);
        assert_eq!(layout.data_offset % DATA_ALIGN, 0);
        assert!(layout.metadata_offset >= HEADER_BYTES + 7 * ZONE_ENTRY_BYTES);
        assert!(layout.data_offset >= layout.metadata_offset + 7 * 2048 * 64);
        assert_eq!(layout.file_bytes, layout.data_offset + 7 * (3 << 20));
    }
}
