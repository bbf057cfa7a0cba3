//! The device write buffer (DRAM, power-protected): a write completes when its data is
//! here; the data leaves when its program unit has been programmed.
//!
//! Admission is first come, first served: a write never enters before an earlier one,
//! and waits, when the buffer is full, for the earliest programs to end.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::Ns;

#[derive(Clone, Debug)]
pub(crate) struct WriteBuffer {
    capacity_bytes: u64,
    /// Bytes admitted and not yet released (scheduled or still in a partial unit).
    held_bytes: u64,
    /// Scheduled releases: (program end, bytes).
    releases: BinaryHeap<Reverse<(Ns, u64)>>,
    last_admit: Ns,
}

impl WriteBuffer {
    pub fn new(capacity_bytes: u64) -> WriteBuffer {
        WriteBuffer { capacity_bytes, held_bytes: 0, releases: BinaryHeap::with_capacity(1024), last_admit: 0 }
    }

    /// Admits `bytes` no earlier than `now`; returns when they are in the buffer.
    pub fn admit(&mut self, now: Ns, bytes: u64) -> Ns {
        assert!(bytes <= self.capacity_bytes, "a single admission of {bytes} B exceeds the write buffer");
        let mut at = now.max(self.last_admit);
        while let Some(&Reverse((release, released))) = self.releases.peek() {
            if release > at && self.held_bytes + bytes <= self.capacity_bytes {
                break;
            }
            self.releases.pop();
            self.held_bytes -= released;
            at = at.max(release);
        }
        assert!(
            self.held_bytes + bytes <= self.capacity_bytes,
            "write buffer full of unscheduled partial units: make write_buffer_bytes larger than \
             (open zones + 2) program units"
        );
        self.held_bytes += bytes;
        self.last_admit = at;
        at
    }

    /// Held bytes that will leave at `at` (their program's end).
    pub fn release_at(&mut self, at: Ns, bytes: u64) {
        debug_assert!(bytes <= self.held_bytes);
        self.releases.push(Reverse((at, bytes)));
    }

    /// Held bytes dropped at once (a reset zone's unprogrammed tail).
    pub fn discard(&mut self, bytes: u64) {
        assert!(bytes <= self.held_bytes, "discarding more than the buffer holds");
        self.held_bytes -= bytes;
    }

    #[cfg(test)]
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_buffer_waits_for_the_earliest_release() {
        let mut buffer = WriteBuffer::new(100);
        assert_eq!(buffer.admit(0, 60), 0);
        buffer.release_at(500, 60);
        assert_eq!(buffer.admit(10, 40), 10, "fits beside the first write");
        buffer.release_at(300, 40);
        assert_eq!(buffer.admit(20, 40), 300, "waits for the 40 B released at 300");
        assert_eq!(buffer.admit(20, 10), 500, "full again: waits for the 60 B released at 500");
        assert_eq!(buffer.admit(0, 10), 500, "admission is first come, first served");
        assert_eq!(buffer.held_bytes(), 40 + 10 + 10);
    }

    #[test]
    fn releases_in_the_past_free_space_at_once() {
        let mut buffer = WriteBuffer::new(100);
        buffer.admit(0, 100);
        buffer.release_at(50, 100);
        assert_eq!(buffer.admit(1_000, 100), 1_000);
        buffer.discard(100);
        assert_eq!(buffer.held_bytes(), 0);
    }
}
