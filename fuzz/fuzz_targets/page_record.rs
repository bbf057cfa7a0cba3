//! A per-LBA metadata area read back from a device: whatever its bytes, the decoder
//! answers a record or an error, never panics; a record it accepts re-encodes to the
//! same bytes. The checksum is fixed up in half the inputs, so the checks behind it
//! (version, generation, padding) are reached too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use znswap_core::record::{decode_metadata, encode_page_record, PAGE_RECORD_BYTES, PAGE_RECORD_CHECKSUM_OFFSET};

fuzz_target!(|input: &[u8]| {
    if input.len() < 9 {
        return;
    }
    let zone = u32::from_le_bytes(input[0..4].try_into().unwrap());
    let generation = u32::from_le_bytes(input[4..8].try_into().unwrap());
    let fix_checksum = input[8] & 1 == 1;
    let mut bytes = input[9..].to_vec();
    if fix_checksum && bytes.len() >= PAGE_RECORD_BYTES {
        let mut crc = crc32c::crc32c(&zone.to_le_bytes());
        crc = crc32c::crc32c_append(crc, &bytes[..PAGE_RECORD_CHECKSUM_OFFSET]);
        bytes[PAGE_RECORD_CHECKSUM_OFFSET..PAGE_RECORD_BYTES].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(record) = decode_metadata(&bytes, zone, generation) {
        let mut again = [0u8; PAGE_RECORD_BYTES];
        encode_page_record(record, zone, generation, &mut again);
        assert_eq!(&again[..], &bytes[..PAGE_RECORD_BYTES], "an accepted record does not re-encode to itself");
        assert!(bytes[PAGE_RECORD_BYTES..].iter().all(|&byte| byte == 0), "padding accepted");
    }
});
