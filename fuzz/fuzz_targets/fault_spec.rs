//! `--inject-faults`: any text parses to a spec or a clear error, never a panic; a spec
//! prints as text that parses back to the same spec.
#![no_main]

use libfuzzer_sys::fuzz_target;
use znswap_zoned::FaultSpec;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else { return };
    match text.parse::<FaultSpec>() {
        Ok(spec) => {
            let again: FaultSpec = spec.to_string().parse().expect("a printed spec parses");
            assert_eq!(again, spec, "{text:?} printed as {spec}");
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
});
