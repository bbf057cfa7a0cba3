//! `swap_cluster_info` and `swap_cluster_list` (mm/swapfile.c, include/linux/swap.h):
//! per-cluster use counts and the singly linked FIFO lists of free and to-be-discarded
//! clusters. As in the kernel, a cluster is on at most one list, and the link lives in
//! the cluster's own entry.

/// One cluster's `swap_cluster_info`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ClusterInfo {
    /// Slots in use (`cluster_count`); header, bad and beyond-the-end slots count as used.
    pub(crate) count: u32,
    /// `CLUSTER_FLAG_FREE`: on the free list.
    pub(crate) free: bool,
    /// The next cluster on whichever list this one is on (`cluster_next`).
    next: u32,
}

/// A `swap_cluster_list`: head and tail indices, linked through the clusters' `next`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ClusterList {
    ends: Option<(u32, u32)>,
    len: u32,
}

impl ClusterList {
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_none()
    }

    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// `cluster_list_first`.
    pub(crate) fn first(&self) -> Option<u32> {
        self.ends.map(|(head, _)| head)
    }

    /// `cluster_list_add_tail`.
    pub(crate) fn add_tail(&mut self, clusters: &mut [ClusterInfo], index: u32) {
        match self.ends {
            None => self.ends = Some((index, index)),
            Some((head, tail)) => {
                clusters[tail as usize].next = index;
                self.ends = Some((head, index));
            }
        }
        self.len += 1;
    }

    /// `cluster_list_del_first`.
    pub(crate) fn del_first(&mut self, clusters: &[ClusterInfo]) -> Option<u32> {
        let (head, tail) = self.ends?;
        self.ends = if head == tail { None } else { Some((clusters[head as usize].next, tail)) };
        self.len -= 1;
        Some(head)
    }

    /// The members from head to tail (tests and invariant checks).
    pub(crate) fn iter<'a>(&self, clusters: &'a [ClusterInfo]) -> impl Iterator<Item = u32> + 'a {
        let mut cursor = self.ends;
        std::iter::from_fn(move || {
            let (head, tail) = cursor?;
            cursor = if head == tail { None } else { Some((clusters[head as usize].next, tail)) };
            Some(head)
        })
    }
}
