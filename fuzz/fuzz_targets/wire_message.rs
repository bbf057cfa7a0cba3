//! A message from a process the daemon does not trust (or, the other way, from a daemon
//! a tenant's library must not trust): `ToDaemon::decode` / `ToTenant::decode` answer a
//! message or a clear error, never a panic, and what they accept re-encodes to exactly
//! the input's bytes (no two byte strings mean one message, so nothing a check passed
//! can mean something else later). The first byte picks the direction.
#![no_main]

use libfuzzer_sys::fuzz_target;
use znswap_wire::{ToDaemon, ToTenant, MESSAGE_BYTES_MAX};

fuzz_target!(|input: &[u8]| {
    let Some((&direction, bytes)) = input.split_first() else { return };
    if bytes.len() > MESSAGE_BYTES_MAX {
        // The socket refuses longer messages before they are decoded (truncated).
        return;
    }
    let mut again = Vec::new();
    if direction & 1 == 0 {
        if let Ok(message) = ToDaemon::decode(bytes) {
            message.encode(&mut again);
            assert_eq!(again, bytes, "{message:?}");
            assert!(message.fds() <= znswap_wire::FDS_MAX);
        }
    } else if let Ok(message) = ToTenant::decode(bytes) {
        message.encode(&mut again);
        assert_eq!(again, bytes, "{message:?}");
    }
});
