//! Sizes (`--memory`, `--zone-size`, ...): any text parses to bytes or a clear error,
//! never a panic, and a whole number with a unit is exactly that many bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use znswap_zoned::{format_size, parse_size};

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else { return };
    match parse_size(text) {
        Ok(bytes) => {
            let _ = format_size(bytes);
            let trimmed = text.trim();
            let digits = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
            if digits > 0 && digits == trimmed.len() {
                assert_eq!(Some(bytes), trimmed.parse::<u64>().ok(), "{text:?}");
            }
            if let Some(whole) = trimmed.strip_suffix(['M', 'm']).and_then(|number| number.parse::<u64>().ok()) {
                assert_eq!(whole.checked_mul(1 << 20), Some(bytes), "{text:?}");
            }
        }
        Err(error) => assert!(!error.is_empty()),
    }
});
