//! GC victim candidates bucketed by garbage (invalid + swap-cached slots), so choosing a
//! victim among thousands of small zones costs a bitmap scan over the buckets, not a scan
//! over the zones (the kernel POC scanned every zone).
//!
//! Buckets are intrusive doubly linked lists over zone indexes: no allocation after
//! start-up, O(1) insert, remove and move.

const NONE: u32 = u32::MAX;
const BUCKETS_MAX: u32 = 1024;

pub struct VictimIndex {
    zone_capacity_pages: u32,
    bucket_count: u32,
    heads: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    /// Bucket of each zone, `NONE` when not a candidate.
    bucket_of: Vec<u32>,
    /// Non-empty buckets, one bit each.
    nonempty: Vec<u64>,
    len: u32,
}

impl VictimIndex {
    pub fn new(zone_count: u32, zone_capacity_pages: u32) -> VictimIndex {
        // Exact buckets for zones up to 1023 slots, quantized above.
        let bucket_count = (zone_capacity_pages + 1).min(BUCKETS_MAX);
        VictimIndex {
            zone_capacity_pages,
            bucket_count,
            heads: vec![NONE; bucket_count as usize],
            next: vec![NONE; zone_count as usize],
            prev: vec![NONE; zone_count as usize],
            bucket_of: vec![NONE; zone_count as usize],
            nonempty: vec![0; (bucket_count as usize).div_ceil(64)],
            len: 0,
        }
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, zone: u32) -> bool {
        self.bucket_of[zone as usize] != NONE
    }

    fn bucket(&self, garbage: u32) -> u32 {
        assert!(garbage <= self.zone_capacity_pages);
        (garbage as u64 * (self.bucket_count as u64 - 1) / self.zone_capacity_pages as u64) as u32
    }

    /// Inserts or moves `zone` to the bucket for `garbage`.
    pub fn update(&mut self, zone: u32, garbage: u32) {
        let bucket = self.bucket(garbage);
        if self.bucket_of[zone as usize] == bucket {
            return;
        }
        self.remove(zone);
        let head = self.heads[bucket as usize];
        self.next[zone as usize] = head;
        self.prev[zone as usize] = NONE;
        if head != NONE {
            self.prev[head as usize] = zone;
        }
        self.heads[bucket as usize] = zone;
        self.bucket_of[zone as usize] = bucket;
        self.nonempty[bucket as usize / 64] |= 1 << (bucket % 64);
        self.len += 1;
    }

    pub fn remove(&mut self, zone: u32) {
        let bucket = self.bucket_of[zone as usize];
        if bucket == NONE {
            return;
        }
        let (prev, next) = (self.prev[zone as usize], self.next[zone as usize]);
        if prev != NONE {
            self.next[prev as usize] = next;
        } else {
            self.heads[bucket as usize] = next;
        }
        if next != NONE {
            self.prev[next as usize] = prev;
        }
        if self.heads[bucket as usize] == NONE {
            self.nonempty[bucket as usize / 64] &= !(1 << (bucket % 64));
        }
        self.bucket_of[zone as usize] = NONE;
        self.next[zone as usize] = NONE;
        self.prev[zone as usize] = NONE;
        self.len -= 1;
    }

    /// Highest non-empty bucket below `below` (exclusive), scanning bitmap words.
    fn highest_bucket_below(&self, below: u32) -> Option<u32> {
        let mut bucket = below;
        while bucket > 0 {
            let top = bucket - 1;
            let word = self.nonempty[top as usize / 64] & (u64::MAX >> (63 - top % 64));
            if word != 0 {
                return Some((top / 64) * 64 + 63 - word.leading_zeros());
            }
            bucket = (top / 64) * 64;
        }
        None
    }

    /// Greedy: a zone in the bucket with the most garbage.
    pub fn most_garbage(&self) -> Option<u32> {
        self.highest_bucket_below(self.bucket_count).map(|bucket| self.heads[bucket as usize])
    }

    /// Up to `out.len()` candidates from the highest buckets down (for cost-benefit and
    /// multi-victim selection); returns how many were written.
    pub fn top_candidates(&self, out: &mut [u32]) -> usize {
        let mut count = 0;
        let mut below = self.bucket_count;
        while count < out.len() {
            let Some(bucket) = self.highest_bucket_below(below) else { break };
            let mut zone = self.heads[bucket as usize];
            while zone != NONE && count < out.len() {
                out[count] = zone;
                count += 1;
                zone = self.next[zone as usize];
            }
            below = bucket;
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_most_garbage() {
        let mut index = VictimIndex::new(200, 100);
        for zone in 0..200 {
            index.update(zone, zone % 90);
        }
        assert_eq!(index.len(), 200);
        let best = index.most_garbage().unwrap();
        assert_eq!(best % 90, 89);
        index.remove(89);
        index.remove(179);
        assert_eq!(index.most_garbage().unwrap() % 90, 88);
        index.update(5, 100);
        assert_eq!(index.most_garbage(), Some(5));
        let mut out = [0u32; 5];
        assert_eq!(index.top_candidates(&mut out), 5);
        assert_eq!(out[0], 5);
        assert!(out[1..].iter().all(|zone| zone % 90 >= 87));
    }

    #[test]
    fn quantized_buckets_for_large_zones() {
        let mut index = VictimIndex::new(4, 270_000);
        index.update(0, 10);
        index.update(1, 269_000);
        index.update(2, 270_000);
        assert_eq!(index.most_garbage(), Some(2));
        index.remove(2);
        assert_eq!(index.most_garbage(), Some(1));
        index.remove(1);
        index.remove(0);
        assert!(index.is_empty());
        assert_eq!(index.most_garbage(), None);
    }

    proptest::proptest! {
        /// The index against a plain map: the greedy pick has the most garbage, and the
        /// candidate list is ordered by garbage.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u32..40, proptest::option::of(0u32..=300)), 1..400)) {
            let mut index = VictimIndex::new(40, 300);
            let mut model = std::collections::BTreeMap::new();
            for (zone, garbage) in ops {
                match garbage {
                    Some(garbage) => {
                        index.update(zone, garbage);
                        model.insert(zone, garbage);
                    }
                    None => {
                        index.remove(zone);
                        model.remove(&zone);
                    }
                }
                proptest::prop_assert_eq!(index.len() as usize, model.len());
                let best = model.values().max().copied();
                proptest::prop_assert_eq!(index.most_garbage().map(|zone| model[&zone]), best);
                let mut out = [0u32; 8];
                let count = index.top_candidates(&mut out);
                proptest::prop_assert_eq!(count, model.len().min(8));
                for pair in out[..count].windows(2) {
                    proptest::prop_assert!(model[&pair[0]] >= model[&pair[1]]);
                }
            }
        }
    }
}
