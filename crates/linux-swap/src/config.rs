//! Configuration of a swap area: its size, CPUs, discard mode and readahead window.

use thiserror::Error;

use crate::{FINE_DISCARD_SLOTS, PAGE_CLUSTER_DEFAULT, SWAPFILE_CLUSTER};

/// How freed slots reach the SSD as TRIMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Discard {
    /// No discard (the distribution default): the SSD never learns a slot was freed.
    None,
    /// `swapon --discard=pages` (`SWP_PAGE_DISCARD`): a cluster whose 512 slots are all
    /// free is discarded as one range before it can be allocated again
    /// (`swap_cluster_schedule_discard` / `swap_do_scheduled_discard`).
    Pages,
    /// The paper's special mechanism (§3.1.1): every aligned group of 8 slots is trimmed
    /// as soon as all 8 are free. Clusters themselves are not discarded.
    Fine8,
}

/// A swap area as `swapon` would set it up on a non-rotational block device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwapConfig {
    /// Slots of the area including the header at slot 0 (`si->max`).
    pub slots: u64,
    /// CPUs, each with its own current cluster and scan base.
    pub cpus: u32,
    pub discard: Discard,
    /// `vm.page-cluster`: readahead windows are 2^page_cluster slots; 0 disables readahead.
    pub page_cluster: u32,
    /// The "swap reclamation cutoff" (the paper's term, §3.1.2, Fig. 4): swap counts as
    /// full once more than this percentage of slots is in use. Linux hard-codes 50
    /// (`vm_swap_full`); the paper varies it.
    pub swap_full_cutoff_percent: u8,
    /// Seed of `prandom_u32_max`, which picks the per-CPU scan bases at `swapon` and when
    /// a scan base crosses a 64 MiB address-space trunk.
    pub seed: u64,
}

/// `vm_swap_full`'s fixed cutoff: half the slots.
pub const SWAP_FULL_CUTOFF_PERCENT_LINUX: u8 = 50;

/// The most `page_cluster` the model accepts (the kernel allows any, but a window larger
/// than a cluster reads unrelated data).
pub const PAGE_CLUSTER_MAX: u32 = 9;

impl SwapConfig {
    /// Linux 5.12 defaults: `page-cluster` 3, the 50 % cutoff, seed 0.
    pub fn new(slots: u64, cpus: u32, discard: Discard) -> SwapConfig {
        SwapConfig {
            slots,
            cpus,
            discard,
            page_cluster: PAGE_CLUSTER_DEFAULT,
            swap_full_cutoff_percent: SWAP_FULL_CUTOFF_PERCENT_LINUX,
            seed: 0,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.slots < 2 {
            return Err(ConfigError::TooFewSlots { slots: self.slots });
        }
        if self.slots > u32::MAX as u64 * SWAPFILE_CLUSTER {
            return Err(ConfigError::TooManySlots { slots: self.slots });
        }
        if self.cpus == 0 {
            return Err(ConfigError::NoCpus);
        }
        if self.page_cluster > PAGE_CLUSTER_MAX {
            return Err(ConfigError::PageClusterTooLarge { page_cluster: self.page_cluster });
        }
        if self.swap_full_cutoff_percent > 100 {
            return Err(ConfigError::CutoffOutOfRange { percent: self.swap_full_cutoff_percent });
        }
        debug_assert!(FINE_DISCARD_SLOTS.is_power_of_two() && SWAPFILE_CLUSTER % FINE_DISCARD_SLOTS == 0);
        Ok(())
    }
}

/// A swap area that cannot be set up, and what to change.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("a swap area of {slots} slots has no room for data: slot 0 is the header; use at least 2 slots")]
    TooFewSlots { slots: u64 },
    #[error("a swap area of {slots} slots has more clusters than a u32 counts; use fewer slots")]
    TooManySlots { slots: u64 },
    #[error("a swap area needs at least one CPU to allocate from; set cpus to 1 or more")]
    NoCpus,
    #[error(
        "page_cluster {page_cluster} reads windows larger than a cluster; use 0..={PAGE_CLUSTER_MAX} (Linux default 3)"
    )]
    PageClusterTooLarge { page_cluster: u32 },
    #[error("swap_full_cutoff_percent {percent} is over 100; use 0..=100 (Linux: 50)")]
    CutoffOutOfRange { percent: u8 },
}
