//! Positioned I/O on descriptors opened with O_DIRECT: buffers must be aligned, so an
//! unaligned caller buffer goes through a per-thread aligned bounce buffer.

use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Alignment that satisfies O_DIRECT on every device we meet (4 KiB sectors at most).
pub(crate) const DIRECT_ALIGN: usize = 4096;

thread_local! {
    static BOUNCE: RefCell<AlignedBuffer> = RefCell::new(AlignedBuffer::default());
}

#[derive(Default)]
struct AlignedBuffer {
    storage: Vec<u8>,
}

impl AlignedBuffer {
    fn get(&mut self, len: usize) -> &mut [u8] {
        if self.storage.len() < len + DIRECT_ALIGN {
            self.storage = vec![0; len + DIRECT_ALIGN];
        }
        let skew = self.storage.as_ptr().align_offset(DIRECT_ALIGN);
        &mut self.storage[skew..skew + len]
    }
}

fn is_aligned(buffer: &[u8]) -> bool {
    buffer.as_ptr() as usize % DIRECT_ALIGN == 0 && buffer.len() % DIRECT_ALIGN == 0
}

/// Writes all of `data` at `position`, bouncing it if it is not aligned.
pub(crate) fn write_at(file: &File, data: &[u8], position: u64) -> std::io::Result<()> {
    if is_aligned(data) {
        return file.write_all_at(data, position);
    }
    BOUNCE.with(|bounce| {
        let mut bounce = bounce.borrow_mut();
        let staged = bounce.get(data.len());
        staged.copy_from_slice(data);
        file.write_all_at(staged, position)
    })
}

/// Fills `data` from `position`, bouncing it if it is not aligned.
pub(crate) fn read_at(file: &File, data: &mut [u8], position: u64) -> std::io::Result<()> {
    if is_aligned(data) {
        return file.read_exact_at(data, position);
    }
    BOUNCE.with(|bounce| {
        let mut bounce = bounce.borrow_mut();
        let staged = bounce.get(data.len());
        file.read_exact_at(staged, position)?;
        data.copy_from_slice(staged);
        Ok(())
    })
}
