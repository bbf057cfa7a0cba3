//! On-device reverse-map records, mirroring `docs/format.md` byte by byte.
//!
//! Every written slot carries the owner id and page index of its page, so the GC can find
//! and remap the owner without a host reverse table. Two encodings:
//! - a 16-byte **page record** in the page's per-LBA metadata (zero-padded to 64 bytes
//!   on a 64-byte format);
//! - a 4096-byte **chunk footer** in the last page of a chunk, holding the page records of
//!   the chunk's other pages.
//!
//! Records are untrusted input: decoding checks the checksum, the version, the zone the
//! record was read from and the zone's reset generation, and reports a typed error.

/// Format version written in every record and footer.
pub const FORMAT_VERSION: u8 = 1;

// Page record (16 bytes), little endian.
pub const PAGE_RECORD_BYTES: usize = 16;
pub const PAGE_RECORD_OWNER_OFFSET: usize = 0; // u32
pub const PAGE_RECORD_PAGE_OFFSET: usize = 4; // u40
pub const PAGE_RECORD_VERSION_OFFSET: usize = 9; // u8
pub const PAGE_RECORD_GENERATION_OFFSET: usize = 10; // u16, zone resets mod 2^16
pub const PAGE_RECORD_CHECKSUM_OFFSET: usize = 12; // u32 crc32c
/// Page indexes are 40 bits: 2^40 pages of 4 KiB per owner.
pub const PAGE_INDEX_MAX: u64 = (1 << 40) - 1;

// Chunk footer (one 4096-byte page), little endian.
pub const FOOTER_BYTES: usize = 4096;
pub const FOOTER_MAGIC: [u8; 8] = *b"ZNSWFOOT";
pub const FOOTER_MAGIC_OFFSET: usize = 0; // [u8; 8]
pub const FOOTER_VERSION_OFFSET: usize = 8; // u8
pub const FOOTER_RESERVED_OFFSET: usize = 9; // u8, zero
pub const FOOTER_COUNT_OFFSET: usize = 10; // u16, data pages described
pub const FOOTER_ZONE_OFFSET: usize = 12; // u32
pub const FOOTER_GENERATION_OFFSET: usize = 16; // u32, zone resets mod 2^32
pub const FOOTER_CHUNK_PAGES_OFFSET: usize = 20; // u32, data pages + footer page
pub const FOOTER_RESERVED2_OFFSET: usize = 24; // u32, zero (a zone append's place is
                                               // known only after it completes)
pub const FOOTER_CHECKSUM_OFFSET: usize = 28; // u32 crc32c
pub const FOOTER_RECORDS_OFFSET: usize = 32;
pub const FOOTER_RECORDS_MAX: usize = (FOOTER_BYTES - FOOTER_RECORDS_OFFSET) / PAGE_RECORD_BYTES;

/// What a page record says: the owner page whose data is in the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRecord {
    pub owner: u32,
    pub page: u64,
}

/// Why a record was not trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error("record checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("unknown record format version {found} (this build reads {FORMAT_VERSION})")]
    Version { found: u8 },
    #[error("chunk footer magic missing")]
    Magic,
    #[error("record from zone {found} read back from zone {expected}")]
    WrongZone { expected: u32, found: u32 },
    #[error("stale record: written in zone generation {found}, zone is at {expected}")]
    Stale { expected: u32, found: u32 },
    #[error("chunk footer describes {found}, expected {expected}")]
    Layout { expected: u64, found: u64 },
    #[error("metadata padding is not zero")]
    Padding,
    #[error("record names owner {owner} page {page}, whose entry does not point at this slot")]
    Mismatch { owner: u32, page: u64 },
    #[error("no footer found for the slot")]
    NoFooter,
    #[error("record buffer of {length} bytes, expected {expected}")]
    Length { length: usize, expected: usize },
}

fn checksum(zone: u32, bytes: &[u8]) -> u32 {
    // The zone index is mixed in but not stored: a record read back from another zone
    // fails its checksum, while staying within 16 bytes.
    crc32c::crc32c_append(crc32c::crc32c(&zone.to_le_bytes()), bytes)
}

fn read_u16(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

/// Encodes a page record for a page appended to `zone` in reset generation `generation`.
pub fn encode_page_record(record: PageRecord, zone: u32, generation: u32, out: &mut [u8]) {
    assert_eq!(out.len(), PAGE_RECORD_BYTES);
    assert!(record.page <= PAGE_INDEX_MAX, "page index {} beyond 40 bits", record.page);
    out[PAGE_RECORD_OWNER_OFFSET..PAGE_RECORD_OWNER_OFFSET + 4].copy_from_slice(&record.owner.to_le_bytes());
    out[PAGE_RECORD_PAGE_OFFSET..PAGE_RECORD_PAGE_OFFSET + 5].copy_from_slice(&record.page.to_le_bytes()[..5]);
    out[PAGE_RECORD_VERSION_OFFSET] = FORMAT_VERSION;
    out[PAGE_RECORD_GENERATION_OFFSET..PAGE_RECORD_GENERATION_OFFSET + 2]
        .copy_from_slice(&(generation as u16).to_le_bytes());
    let crc = checksum(zone, &out[..PAGE_RECORD_CHECKSUM_OFFSET]);
    out[PAGE_RECORD_CHECKSUM_OFFSET..].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes a page record read back from `zone`, whose current generation is `generation`.
pub fn decode_page_record(bytes: &[u8], zone: u32, generation: u32) -> Result<PageRecord, RecordError> {
    if bytes.len() != PAGE_RECORD_BYTES {
        return Err(RecordError::Length { length: bytes.len(), expected: PAGE_RECORD_BYTES });
    }
    let stored = read_u32(bytes, PAGE_RECORD_CHECKSUM_OFFSET);
    let computed = checksum(zone, &bytes[..PAGE_RECORD_CHECKSUM_OFFSET]);
    if stored != computed {
        return Err(RecordError::Checksum { stored, computed });
    }
    let version = bytes[PAGE_RECORD_VERSION_OFFSET];
    if version != FORMAT_VERSION {
        return Err(RecordError::Version { found: version });
    }
    let found = read_u16(bytes, PAGE_RECORD_GENERATION_OFFSET) as u32;
    if found != generation & 0xffff {
        return Err(RecordError::Stale { expected: generation & 0xffff, found });
    }
    let owner = read_u32(bytes, PAGE_RECORD_OWNER_OFFSET);
    let mut page = [0u8; 8];
    page[..5].copy_from_slice(&bytes[PAGE_RECORD_PAGE_OFFSET..PAGE_RECORD_PAGE_OFFSET + 5]);
    Ok(PageRecord { owner, page: u64::from_le_bytes(page) })
}

/// Decodes a per-LBA metadata area of `metadata_bytes` (16 or 64): the record, then zeros.
pub fn decode_metadata(bytes: &[u8], zone: u32, generation: u32) -> Result<PageRecord, RecordError> {
    if bytes.len() < PAGE_RECORD_BYTES {
        return Err(RecordError::Length { length: bytes.len(), expected: PAGE_RECORD_BYTES });
    }
    if bytes[PAGE_RECORD_BYTES..].iter().any(|&b| b != 0) {
        return Err(RecordError::Padding);
    }
    decode_page_record(&bytes[..PAGE_RECORD_BYTES], zone, generation)
}

/// Identity of a chunk: where its footer claims to belong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkIdentity {
    pub zone: u32,
    pub generation: u32,
    /// Data pages + 1: the length of the append that wrote the chunk.
    pub chunk_pages: u32,
}

/// Encodes a footer describing `records` (the chunk's data pages in slot order).
pub fn encode_footer(identity: ChunkIdentity, records: &[PageRecord], out: &mut [u8]) {
    assert_eq!(out.len(), FOOTER_BYTES);
    assert!(records.len() <= FOOTER_RECORDS_MAX);
    assert!(records.len() < identity.chunk_pages as usize);
    out.fill(0);
    out[FOOTER_MAGIC_OFFSET..FOOTER_MAGIC_OFFSET + 8].copy_from_slice(&FOOTER_MAGIC);
    out[FOOTER_VERSION_OFFSET] = FORMAT_VERSION;
    out[FOOTER_COUNT_OFFSET..FOOTER_COUNT_OFFSET + 2].copy_from_slice(&(records.len() as u16).to_le_bytes());
    out[FOOTER_ZONE_OFFSET..FOOTER_ZONE_OFFSET + 4].copy_from_slice(&identity.zone.to_le_bytes());
    out[FOOTER_GENERATION_OFFSET..FOOTER_GENERATION_OFFSET + 4].copy_from_slice(&identity.generation.to_le_bytes());
    out[FOOTER_CHUNK_PAGES_OFFSET..FOOTER_CHUNK_PAGES_OFFSET + 4].copy_from_slice(&identity.chunk_pages.to_le_bytes());
    for (index, record) in records.iter().enumerate() {
        let at = FOOTER_RECORDS_OFFSET + index * PAGE_RECORD_BYTES;
        encode_page_record(*record, identity.zone, identity.generation, &mut out[at..at + PAGE_RECORD_BYTES]);
    }
    let crc = footer_checksum(out);
    out[FOOTER_CHECKSUM_OFFSET..FOOTER_CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
}

fn footer_checksum(bytes: &[u8]) -> u32 {
    // Covers the whole page except the checksum field, so any flip anywhere is caught.
    let head = crc32c::crc32c(&bytes[..FOOTER_CHECKSUM_OFFSET]);
    crc32c::crc32c_append(head, &bytes[FOOTER_CHECKSUM_OFFSET + 4..])
}

/// Decodes a footer read back from the chunk `expected`; fills `records` with the count
/// it holds and returns that count.
pub fn decode_footer(bytes: &[u8], expected: ChunkIdentity, records: &mut [PageRecord]) -> Result<usize, RecordError> {
    if bytes.len() != FOOTER_BYTES {
        return Err(RecordError::Length { length: bytes.len(), expected: FOOTER_BYTES });
    }
    let stored = read_u32(bytes, FOOTER_CHECKSUM_OFFSET);
    let computed = footer_checksum(bytes);
    if stored != computed {
        return Err(RecordError::Checksum { stored, computed });
    }
    if bytes[FOOTER_MAGIC_OFFSET..FOOTER_MAGIC_OFFSET + 8] != FOOTER_MAGIC {
        return Err(RecordError::Magic);
    }
    let version = bytes[FOOTER_VERSION_OFFSET];
    if version != FORMAT_VERSION {
        return Err(RecordError::Version { found: version });
    }
    let zone = read_u32(bytes, FOOTER_ZONE_OFFSET);
    if zone != expected.zone {
        return Err(RecordError::WrongZone { expected: expected.zone, found: zone });
    }
    let generation = read_u32(bytes, FOOTER_GENERATION_OFFSET);
    if generation != expected.generation {
        return Err(RecordError::Stale { expected: expected.generation, found: generation });
    }
    let chunk_pages = read_u32(bytes, FOOTER_CHUNK_PAGES_OFFSET);
    if chunk_pages != expected.chunk_pages {
        return Err(RecordError::Layout { expected: expected.chunk_pages as u64, found: chunk_pages as u64 });
    }
    if bytes[FOOTER_RESERVED_OFFSET] != 0 || read_u32(bytes, FOOTER_RESERVED2_OFFSET) != 0 {
        return Err(RecordError::Padding);
    }
    let count = read_u16(bytes, FOOTER_COUNT_OFFSET) as usize;
    if count >= chunk_pages as usize || count > FOOTER_RECORDS_MAX || count > records.len() {
        return Err(RecordError::Layout { expected: (chunk_pages as u64).saturating_sub(1), found: count as u64 });
    }
    for (index, record) in records.iter_mut().enumerate().take(count) {
        let at = FOOTER_RECORDS_OFFSET + index * PAGE_RECORD_BYTES;
        *record = decode_page_record(&bytes[at..at + PAGE_RECORD_BYTES], zone, generation)?;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn identity(zone: u32, generation: u32) -> ChunkIdentity {
        ChunkIdentity { zone, generation, chunk_pages: 48 }
    }

    #[test]
    fn page_record_layout_is_pinned() {
        let mut bytes = [0u8; 16];
        encode_page_record(PageRecord { owner: 0x0403_0201, page: 0x09_0807_0605 }, 7, 0x1_0b0a, &mut bytes);
        assert_eq!(&bytes[..12], &[1, 2, 3, 4, 5, 6, 7, 8, 9, FORMAT_VERSION, 0x0a, 0x0b]);
    }

    #[test]
    fn metadata_padding_must_be_zero() {
        let mut bytes = [0u8; 64];
        encode_page_record(PageRecord { owner: 1, page: 2 }, 0, 0, &mut bytes[..16]);
        assert_eq!(decode_metadata(&bytes, 0, 0), Ok(PageRecord { owner: 1, page: 2 }));
        bytes[40] = 1;
        assert_eq!(decode_metadata(&bytes, 0, 0), Err(RecordError::Padding));
    }

    #[test]
    fn stale_footer_is_detected() {
        let mut page = vec![0u8; FOOTER_BYTES];
        encode_footer(identity(5, 1), &[PageRecord { owner: 1, page: 1 }], &mut page);
        let mut out = [PageRecord { owner: 0, page: 0 }; FOOTER_RECORDS_MAX];
        assert_eq!(decode_footer(&page, identity(5, 1), &mut out), Ok(1));
        assert_eq!(decode_footer(&page, identity(5, 2), &mut out), Err(RecordError::Stale { expected: 2, found: 1 }));
        assert!(matches!(decode_footer(&page, identity(6, 1), &mut out), Err(RecordError::WrongZone { .. })));
        let other_chunk = ChunkIdentity { chunk_pages: 47, ..identity(5, 1) };
        assert!(matches!(decode_footer(&page, other_chunk, &mut out), Err(RecordError::Layout { .. })));
        let zeroed = vec![0u8; FOOTER_BYTES];
        assert!(decode_footer(&zeroed, identity(5, 1), &mut out).is_err());
    }

    fn records_strategy() -> impl Strategy<Value = Vec<(u32, u64)>> {
        proptest::collection::vec((any::<u32>(), 0..=PAGE_INDEX_MAX), 0..47)
    }

    proptest! {
        #[test]
        fn page_record_round_trip(owner: u32, page in 0..=PAGE_INDEX_MAX, zone: u32, generation: u32) {
            let mut bytes = [0u8; 16];
            encode_page_record(PageRecord { owner, page }, zone, generation, &mut bytes);
            prop_assert_eq!(decode_page_record(&bytes, zone, generation), Ok(PageRecord { owner, page }));
        }

        #[test]
        fn page_record_bit_flip_detected(owner: u32, page in 0..=PAGE_INDEX_MAX, zone: u32, bit in 0usize..128) {
            let mut bytes = [0u8; 16];
            encode_page_record(PageRecord { owner, page }, zone, 9, &mut bytes);
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode_page_record(&bytes, zone, 9).is_err());
        }

        #[test]
        fn page_record_other_zone_detected(owner: u32, page in 0..=PAGE_INDEX_MAX, zone: u32, other: u32) {
            prop_assume!(zone != other);
            let mut bytes = [0u8; 16];
            encode_page_record(PageRecord { owner, page }, zone, 0, &mut bytes);
            prop_assert!(decode_page_record(&bytes, other, 0).is_err());
        }

        #[test]
        fn footer_round_trip(records in records_strategy(), zone: u32, generation: u32) {
            let records: Vec<PageRecord> = records.into_iter().map(|(owner, page)| PageRecord { owner, page }).collect();
            let mut page = vec![0u8; FOOTER_BYTES];
            encode_footer(identity(zone, generation), &records, &mut page);
            let mut out = [PageRecord { owner: 0, page: 0 }; FOOTER_RECORDS_MAX];
            let count = decode_footer(&page, identity(zone, generation), &mut out).unwrap();
            prop_assert_eq!(&out[..count], &records[..]);
        }

        #[test]
        fn footer_bit_flip_detected(records in records_strategy(), bit in 0usize..FOOTER_BYTES * 8) {
            let records: Vec<PageRecord> = records.into_iter().map(|(owner, page)| PageRecord { owner, page }).collect();
            let mut page = vec![0u8; FOOTER_BYTES];
            encode_footer(identity(1, 1), &records, &mut page);
            page[bit / 8] ^= 1 << (bit % 8);
            let mut out = [PageRecord { owner: 0, page: 0 }; FOOTER_RECORDS_MAX];
            prop_assert!(decode_footer(&page, identity(1, 1), &mut out).is_err());
        }
    }
}
