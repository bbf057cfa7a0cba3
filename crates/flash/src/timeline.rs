//! One resource (a die or a channel) as the set of intervals it is reserved for.
//!
//! A plain busy-until counter would serialise everything in submission order: a transfer
//! reserved 1 ms ahead (behind a program) would block a transfer that could run now on the
//! same channel. Keeping the reserved intervals lets a later command use an earlier gap,
//! as a real controller's per-die queues do. Intervals that end before the current time
//! are dropped, and touching intervals are merged, so the list stays as short as the
//! number of commands in flight.

use crate::Ns;

#[derive(Clone, Debug, Default)]
pub(crate) struct Timeline {
    /// `busy[head..]`: sorted, disjoint, non-touching `[start, end)` reservations. The
    /// entries before `head` are forgotten; they are compacted away now and then.
    busy: Vec<(Ns, Ns)>,
    head: usize,
}

impl Timeline {
    fn live(&self) -> &[(Ns, Ns)] {
        &self.busy[self.head..]
    }

    /// Drops reservations that end at or before `horizon`: no command starts earlier.
    pub fn prune(&mut self, horizon: Ns) {
        while self.head < self.busy.len() && self.busy[self.head].1 <= horizon {
            self.head += 1;
        }
        if self.head == self.busy.len() {
            self.busy.clear();
            self.head = 0;
        } else if self.head >= 64 && self.head * 2 >= self.busy.len() {
            self.busy.drain(..self.head);
            self.head = 0;
        }
    }

    /// The earliest start `>= earliest` at which `duration` fits in a gap, and the index
    /// in `busy` of the first reservation after that gap.
    fn fit(&self, earliest: Ns, duration: Ns) -> (Ns, usize) {
        let len = self.busy.len();
        if len == self.head || self.busy[len - 1].1 <= earliest {
            return (earliest, len);
        }
        // Ends are sorted too (the intervals are disjoint): skip those over by `earliest`.
        // Commands ask either for "now" (the front) or for a time a little ahead (near
        // the back), so look there before searching.
        let mut index = if self.busy[self.head].1 > earliest {
            self.head
        } else {
            let mut back = len - 1;
            while back > self.head && back + 8 > len && self.busy[back - 1].1 > earliest {
                back -= 1;
            }
            if back == self.head || self.busy[back - 1].1 <= earliest {
                back
            } else {
                self.head + self.live().partition_point(|&(_, end)| end <= earliest)
            }
        };
        let mut start = earliest;
        while index < len {
            let (busy_start, busy_end) = self.busy[index];
            if busy_start >= start + duration {
                break;
            }
            start = start.max(busy_end);
            index += 1;
        }
        (start, index)
    }

    /// The earliest start `>= earliest` at which `duration` fits in a gap.
    #[cfg(test)]
    pub fn first_fit(&self, earliest: Ns, duration: Ns) -> Ns {
        self.fit(earliest, duration).0
    }

    /// Marks `[start, start + duration)` busy, inserting before `busy[index]`.
    fn insert(&mut self, index: usize, start: Ns, duration: Ns) {
        if duration == 0 {
            return;
        }
        let end = start + duration;
        let head = self.head;
        assert!(index == head || self.busy[index - 1].1 <= start, "reservation overlaps the one before it");
        assert!(index == self.busy.len() || self.busy[index].0 >= end, "reservation overlaps the one after it");
        let merges_before = index > head && self.busy[index - 1].1 == start;
        let merges_after = index < self.busy.len() && self.busy[index].0 == end;
        match (merges_before, merges_after) {
            (true, true) => {
                self.busy[index - 1].1 = self.busy[index].1;
                self.busy.remove(index);
            }
            (true, false) => self.busy[index - 1].1 = end,
            (false, true) => self.busy[index].0 = start,
            (false, false) => self.busy.insert(index, (start, end)),
        }
    }

    /// Marks `[start, start + duration)` busy; it must be free.
    #[cfg(test)]
    pub fn reserve(&mut self, start: Ns, duration: Ns) {
        let index = self.head + self.live().partition_point(|&(s, _)| s < start);
        self.insert(index, start, duration);
    }

    /// Finds and reserves the earliest fitting slot; returns its start.
    pub fn take(&mut self, earliest: Ns, duration: Ns) -> Ns {
        let (start, index) = self.fit(earliest, duration);
        self.insert(index, start, duration);
        start
    }

    /// End of the last reservation (0 when idle since the horizon).
    pub fn busy_until(&self) -> Ns {
        self.live().last().map_or(0, |&(_, end)| end)
    }

    #[cfg(test)]
    pub fn intervals(&self) -> usize {
        self.live().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_command_uses_an_earlier_gap() {
        let mut timeline = Timeline::default();
        assert_eq!(timeline.take(1_000, 100), 1_000);
        assert_eq!(timeline.take(0, 100), 0, "the gap before the first reservation is free");
        assert_eq!(timeline.take(0, 950), 1_100, "950 ns do not fit in the 900 ns gap");
        assert_eq!(timeline.take(0, 900), 100, "900 ns fit exactly");
        assert_eq!(timeline.intervals(), 1, "touching reservations merge");
        assert_eq!(timeline.busy_until(), 2_050);
    }

    #[test]
    fn prune_forgets_the_past() {
        let mut timeline = Timeline::default();
        timeline.take(0, 10);
        timeline.take(20, 10);
        timeline.take(40, 10);
        timeline.prune(30);
        assert_eq!(timeline.intervals(), 1);
        assert_eq!(timeline.first_fit(30, 10), 30);
        assert_eq!(timeline.first_fit(30, 11), 50);
    }

    /// Against a brute-force model (one flag per time unit): every reservation starts at
    /// the earliest free fit, none overlaps, and pruning forgets only the past.
    #[test]
    fn take_matches_a_brute_force_model() {
        use rand_core::{RngCore, SeedableRng};
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(42);
        let mut timeline = Timeline::default();
        let mut busy = vec![false; 200_000];
        let mut now = 0;
        for _ in 0..2_000 {
            now += rng.next_u64() % 4;
            timeline.prune(now);
            let earliest = now + rng.next_u64() % 200;
            let duration = 1 + rng.next_u64() % 40;
            let expected = (earliest..)
                .find(|&start| (start..start + duration).all(|t| !busy[t as usize]))
                .expect("the model is long enough");
            assert_eq!(timeline.take(earliest, duration), expected);
            (expected..expected + duration).for_each(|t| busy[t as usize] = true);
        }
        let model_end = busy.iter().rposition(|&b| b).unwrap() as Ns + 1;
        assert_eq!(timeline.busy_until(), model_end);
    }

    #[test]
    #[should_panic(expected = "overlaps")]
    fn overlapping_reservation_is_a_bug() {
        let mut timeline = Timeline::default();
        timeline.reserve(0, 10);
        timeline.reserve(5, 10);
    }
}
