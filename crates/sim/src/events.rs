//! The discrete-event core: virtual nanoseconds and a deterministic event queue.
//!
//! Events fire in time order; events at the same nanosecond fire in the order they were
//! scheduled (a sequence number breaks the tie), so a run is a pure function of its
//! configuration and seed, whatever the heap's internal layout.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Virtual time in nanoseconds. Nothing in the simulator reads a wall clock.
pub type Ns = u64;

pub const MICROSECOND_NS: Ns = 1_000;
pub const MILLISECOND_NS: Ns = 1_000_000;
pub const SECOND_NS: Ns = 1_000_000_000;

struct Entry<E> {
    at: Ns,
    sequence: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.sequence == other.sequence
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    /// Reversed: the heap is a max-heap and the earliest event must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at).then_with(|| other.sequence.cmp(&self.sequence))
    }
}

/// A min-queue of events by (time, scheduling order).
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_sequence: u64,
    now: Ns,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> EventQueue<E> {
        EventQueue { heap: BinaryHeap::with_capacity(4096), next_sequence: 0, now: 0 }
    }

    /// The time of the event popped last.
    pub fn now(&self) -> Ns {
        self.now
    }

    /// Schedules `event` at `at`; a time in the past fires at once (at `now`), which
    /// keeps virtual time monotonic.
    pub fn schedule(&mut self, at: Ns, event: E) {
        let at = at.max(self.now);
        self.heap.push(Entry { at, sequence: self.next_sequence, event });
        self.next_sequence += 1;
    }

    /// The earliest event, advancing `now` to its time.
    pub fn pop(&mut self) -> Option<(Ns, E)> {
        let entry = self.heap.pop()?;
        debug_assert!(entry.at >= self.now, "time went backwards");
        self.now = entry.at;
        Some((entry.at, entry.event))
    }

    pub fn peek_time(&self) -> Option<Ns> {
        self.heap.peek().map(|entry| entry.at)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_fire_in_time_then_scheduling_order() {
        let mut queue = EventQueue::new();
        queue.schedule(30, "c");
        queue.schedule(10, "a1");
        queue.schedule(20, "b");
        queue.schedule(10, "a2");
        queue.schedule(10, "a3");
        let order: Vec<&str> = std::iter::from_fn(|| queue.pop().map(|(_, event)| event)).collect();
        assert_eq!(order, ["a1", "a2", "a3", "b", "c"]);
        assert_eq!(queue.now(), 30);
    }

    #[test]
    fn the_past_is_clamped_to_now() {
        let mut queue = EventQueue::new();
        queue.schedule(100, 1);
        assert_eq!(queue.pop(), Some((100, 1)));
        queue.schedule(50, 2);
        assert_eq!(queue.pop(), Some((100, 2)));
        assert!(queue.is_empty());
    }
}
