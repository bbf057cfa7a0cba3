//! A chunk footer page read back from a device: whatever its bytes and whatever chunk
//! the engine expects there, the decoder answers records or an error, never panics or
//! reads out of bounds; what it accepts is consistent with the expected chunk. The page's
//! checksum is fixed up in most inputs, and the expected chunk taken from the page in
//! half, so the layout checks and the records behind them are reached.
#![no_main]

use libfuzzer_sys::fuzz_target;
use znswap_core::record::{
    decode_footer, ChunkIdentity, PageRecord, FOOTER_BYTES, FOOTER_CHECKSUM_OFFSET, FOOTER_CHUNK_PAGES_OFFSET,
    FOOTER_GENERATION_OFFSET, FOOTER_RECORDS_MAX, FOOTER_ZONE_OFFSET,
};

fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 14 {
        return;
    }
    let mode = input[0];
    let mut expected = ChunkIdentity {
        zone: read_u32(input, 1),
        generation: read_u32(input, 5),
        // The engine expects chunks of at least one page (the footer).
        chunk_pages: read_u32(input, 9).max(1),
    };
    let records_room = input[13] as usize % (FOOTER_RECORDS_MAX + 1);
    let mut page = vec![0u8; FOOTER_BYTES];
    let body = &input[14..];
    page[..body.len().min(FOOTER_BYTES)].copy_from_slice(&body[..body.len().min(FOOTER_BYTES)]);
    if mode & 1 == 1 {
        expected = ChunkIdentity {
            zone: read_u32(&page, FOOTER_ZONE_OFFSET),
            generation: read_u32(&page, FOOTER_GENERATION_OFFSET),
            chunk_pages: read_u32(&page, FOOTER_CHUNK_PAGES_OFFSET).max(1),
        };
    }
    if mode & 2 == 0 {
        let head = crc32c::crc32c(&page[..FOOTER_CHECKSUM_OFFSET]);
        let crc = crc32c::crc32c_append(head, &page[FOOTER_CHECKSUM_OFFSET + 4..]);
        page[FOOTER_CHECKSUM_OFFSET..FOOTER_CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let mut records = vec![PageRecord { owner: 0, page: 0 }; records_room];
    if let Ok(count) = decode_footer(&page, expected, &mut records) {
        assert!(count <= records_room && count < expected.chunk_pages as usize, "{count} records accepted");
        assert_eq!(read_u32(&page, FOOTER_ZONE_OFFSET), expected.zone);
        assert_eq!(read_u32(&page, FOOTER_CHUNK_PAGES_OFFSET), expected.chunk_pages);
    }
});
