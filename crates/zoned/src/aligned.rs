//! Page-aligned byte buffers: the O_DIRECT backends (`FileDevice`, `zbd`) move them
//! without the bounce copy an unaligned buffer costs (`direct_io`).

use std::ops::{Deref, DerefMut};

const ALIGN: usize = crate::direct_io::DIRECT_ALIGN;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; ALIGN]);

/// A zero-initialised byte buffer that starts on a 4 KiB boundary.
#[derive(Clone)]
pub struct AlignedBuf {
    blocks: Vec<Block>,
    len: usize,
}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> AlignedBuf {
        AlignedBuf { blocks: vec![Block([0; ALIGN]); len.div_ceil(ALIGN)], len }
    }

    /// An aligned copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> AlignedBuf {
        let mut buffer = AlignedBuf::zeroed(bytes.len());
        buffer.copy_from_slice(bytes);
        buffer
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `Block` is `repr(C)` over `[u8; ALIGN]` with size ALIGN, so the blocks
        // are `blocks.len() * ALIGN >= len` consecutive initialised bytes.
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr().cast::<u8>(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, borrowed mutably through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_on_a_page_and_hold_their_bytes() {
        for len in [0, 1, 4096, 4097, 3 * 4096] {
            let mut buffer = AlignedBuf::zeroed(len);
            assert_eq!(buffer.len(), len);
            assert_eq!(buffer.as_ptr() as usize % ALIGN, 0);
            assert!(buffer.iter().all(|&b| b == 0));
            buffer.fill(7);
            assert!(buffer.iter().all(|&b| b == 7));
        }
        let bytes: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let copy = AlignedBuf::copy_of(&bytes);
        assert_eq!(&copy[..], &bytes[..]);
        assert_eq!(copy.as_ptr() as usize % ALIGN, 0);
    }
}
