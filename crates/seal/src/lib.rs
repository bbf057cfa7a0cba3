//! Page encryption for swap: every page is sealed (encrypted and authenticated) before
//! it leaves memory and opened after it is read back.
//!
//! - **Cipher**: AES-256-GCM (`ring`'s, BoringSSL's assembly; AES-NI and carry-less
//!   multiplication picked at run time). A page is 4096 bytes of ciphertext on the device, nothing more: the
//!   nonce and the tag, its [`Seal`], stay in the pager's memory, beside the page's
//!   state (see the crate's README for why not on the device).
//! - **Nonce**: a 64-bit counter, one per seal, never reused under a key (a key lives
//!   for one run). It does not depend on the LBA, which a zone append decides only after
//!   the write, nor on the slot: the GC moves ciphertext without opening it.
//! - **Associated data**: the page's owner and index, so a slot read for the wrong page
//!   (a foreign or stale page) fails to open as surely as an altered one.
//! - **Key**: 256 bits from the OS's random source at start, held in a page of its own
//!   that is locked in memory where the limit allows, left out of core dumps
//!   (`MADV_DONTDUMP`) and zeroed when the sealer is dropped. It is never written
//!   anywhere.
//!
//! Nothing here allocates after [`Sealer::new`]: pages are opened in a SIGBUS handler
//! in self-paging mode.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};

/// A sealed page's nonce counter (8 bytes, little endian) and tag (16 bytes): what
/// opening it needs besides the key.
pub type Seal = [u8; SEAL_BYTES];

pub const SEAL_BYTES: usize = 24;

/// The seal of no page: never opens anything (its tag is not a real one, and nonce 0 is
/// never handed out).
pub const NO_SEAL: Seal = [0; SEAL_BYTES];

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("no key: the OS's random source failed ({0})")]
    Random(getrandom::Error),
    #[error("no page for the key: mmap failed ({0})")]
    Map(std::io::Error),
    #[error("the cipher refused the key")]
    Key,
}

/// A page failed to open: altered on the device, or not the page it was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a swapped page failed its integrity check (altered on the device, or not this page)")]
pub struct Corrupt;

struct Keyed {
    cipher: LessSafeKey,
    next_nonce: AtomicU64,
}

const KEY_PAGE_BYTES: usize = 4096;
const _: () = assert!(std::mem::size_of::<Keyed>() <= KEY_PAGE_BYTES);

/// Seals and opens pages under one key made at start. Shared by every thread of the
/// pager (and inherited by a fork's child, which reads the parent's slots).
pub struct Sealer {
    keyed: NonNull<Keyed>,
}

// SAFETY: `Keyed` is `Send + Sync` (a cipher used through `&self`, an atomic counter);
// the pointer is owned by the sealer alone and freed only in `drop`.
unsafe impl Send for Sealer {}
// SAFETY: as above.
unsafe impl Sync for Sealer {}

impl Sealer {
    /// A sealer with a fresh key from the OS's random source.
    pub fn new() -> Result<Sealer, SealError> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(SealError::Random)?;
        let sealer = Sealer::with_key(&key);
        zero(&mut key);
        sealer
    }

    /// A sealer with the given key: for tests and deterministic simulation, which need
    /// the same ciphertext for the same seed.
    pub fn with_key(key: &[u8; 32]) -> Result<Sealer, SealError> {
        // SAFETY: a fresh private anonymous mapping; checked below.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                KEY_PAGE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return Err(SealError::Map(std::io::Error::last_os_error()));
        }
        // Best effort, both: a core dump without the key, and the key never in the
        // kernel's swap (mlock fails without CAP_IPC_LOCK beyond RLIMIT_MEMLOCK; the
        // page is then as safe as the rest of the pager's memory).
        // SAFETY: the mapping made above, KEY_PAGE_BYTES long.
        unsafe {
            libc::madvise(page, KEY_PAGE_BYTES, libc::MADV_DONTDUMP);
            libc::mlock(page, KEY_PAGE_BYTES);
        }
        let keyed = page.cast::<Keyed>();
        let cipher = match UnboundKey::new(&AES_256_GCM, key) {
            Ok(key) => LessSafeKey::new(key),
            Err(_) => {
                // SAFETY: the mapping made above, not used since.
                unsafe { libc::munmap(page, KEY_PAGE_BYTES) };
                return Err(SealError::Key);
            }
        };
        // SAFETY: page-aligned (more than `Keyed` needs), large enough (asserted at
        // compile time), and nobody else holds it.
        unsafe { keyed.write(Keyed { cipher, next_nonce: AtomicU64::new(1) }) };
        Ok(Sealer { keyed: NonNull::new(keyed).expect("mmap returned a non-null page") })
    }

    fn keyed(&self) -> &Keyed {
        // SAFETY: written in `with_key`, freed only in `drop`.
        unsafe { self.keyed.as_ref() }
    }

    /// Encrypts `data` in place as `owner`'s page `page`; the seal opens it.
    pub fn seal(&self, owner: u32, page: u64, data: &mut [u8]) -> Seal {
        let keyed = self.keyed();
        let counter = keyed.next_nonce.fetch_add(1, Relaxed);
        assert_ne!(counter, u64::MAX, "the nonce counter wrapped");
        let tag = keyed
            .cipher
            .seal_in_place_separate_tag(nonce(counter), Aad::from(associated(owner, page)), data)
            .expect("a page is far below AES-GCM's message limit");
        let mut seal = [0u8; SEAL_BYTES];
        seal[..8].copy_from_slice(&counter.to_le_bytes());
        seal[8..].copy_from_slice(tag.as_ref());
        seal
    }

    /// Decrypts `data` in place as `owner`'s page `page` sealed with `seal`. On
    /// `Corrupt`, `data` is not the page (it must not be delivered).
    pub fn open(&self, owner: u32, page: u64, data: &mut [u8], seal: &Seal) -> Result<(), Corrupt> {
        let counter = u64::from_le_bytes(seal[..8].try_into().expect("8 bytes"));
        if counter == 0 {
            return Err(Corrupt);
        }
        let tag = Tag::from(<[u8; 16]>::try_from(&seal[8..]).expect("16 bytes"));
        self.keyed()
            .cipher
            .open_in_place_separate_tag(nonce(counter), Aad::from(associated(owner, page)), tag, data, 0..)
            .map(|_| ())
            .map_err(|_| Corrupt)
    }
}

impl Drop for Sealer {
    fn drop(&mut self) {
        let page = self.keyed.as_ptr();
        // SAFETY: the sealer owns the page; nothing uses it after this. The whole page,
        // the cipher's key schedule in it, is zeroed after the cipher's drop.
        unsafe {
            std::ptr::drop_in_place(page);
            zero(std::slice::from_raw_parts_mut(page.cast::<u8>(), KEY_PAGE_BYTES));
            libc::munmap(page.cast(), KEY_PAGE_BYTES);
        }
    }
}

fn nonce(counter: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[..8].copy_from_slice(&counter.to_le_bytes());
    // Unique: the counter never repeats under one key.
    Nonce::assume_unique_for_key(bytes)
}

fn associated(owner: u32, page: u64) -> [u8; 12] {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&owner.to_le_bytes());
    bytes[4..].copy_from_slice(&page.to_le_bytes());
    bytes
}

/// Zeroes `bytes` with writes the compiler may not drop as dead.
fn zero(bytes: &mut [u8]) {
    for byte in bytes.iter_mut() {
        // SAFETY: a valid, exclusive byte.
        unsafe { std::ptr::write_volatile(byte, 0) };
    }
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(fill: u8) -> Vec<u8> {
        (0..4096).map(|i| fill ^ (i as u8)).collect()
    }

    #[test]
    fn sealed_page_opens_to_what_was_sealed_and_hides_it() {
        let sealer = Sealer::new().unwrap();
        let plain = page(7);
        let mut data = plain.clone();
        let seal = sealer.seal(3, 99, &mut data);
        assert_ne!(data, plain, "sealing changed nothing");
        assert!(!data.windows(16).any(|w| plain.windows(16).take(1).any(|p| p == w)), "plaintext visible");
        sealer.open(3, 99, &mut data, &seal).unwrap();
        assert_eq!(data, plain);
    }

    #[test]
    fn same_page_sealed_twice_differs() {
        let sealer = Sealer::new().unwrap();
        let (mut a, mut b) = (page(1), page(1));
        let seal_a = sealer.seal(0, 0, &mut a);
        let seal_b = sealer.seal(0, 0, &mut b);
        assert_ne!(a, b, "a nonce was reused");
        assert_ne!(seal_a, seal_b);
    }

    #[test]
    fn altered_foreign_or_unsealed_pages_do_not_open() {
        let sealer = Sealer::new().unwrap();
        let mut data = page(9);
        let seal = sealer.seal(1, 2, &mut data);
        for bit in [0usize, 1000, 4095 * 8 + 7] {
            let mut altered = data.clone();
            altered[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(sealer.open(1, 2, &mut altered, &seal), Err(Corrupt), "bit {bit}");
        }
        let mut tag_altered = seal;
        tag_altered[20] ^= 0x10;
        assert_eq!(sealer.open(1, 2, &mut data.clone(), &tag_altered), Err(Corrupt));
        assert_eq!(sealer.open(1, 3, &mut data.clone(), &seal), Err(Corrupt), "another page's identity");
        assert_eq!(sealer.open(2, 2, &mut data.clone(), &seal), Err(Corrupt), "another owner's");
        assert_eq!(sealer.open(1, 2, &mut data.clone(), &NO_SEAL), Err(Corrupt));
        let other = Sealer::new().unwrap();
        assert_eq!(other.open(1, 2, &mut data.clone(), &seal), Err(Corrupt), "another run's key");
        sealer.open(1, 2, &mut data, &seal).unwrap();
    }

    #[test]
    fn a_fixed_key_is_deterministic() {
        let (a, b) = (Sealer::with_key(&[5; 32]).unwrap(), Sealer::with_key(&[5; 32]).unwrap());
        let (mut x, mut y) = (page(3), page(3));
        assert_eq!(a.seal(4, 4, &mut x), b.seal(4, 4, &mut y));
        assert_eq!(x, y);
    }
}
