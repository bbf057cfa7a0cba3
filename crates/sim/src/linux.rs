//! Linux 5.12 swap (`znswap-linux-swap`) over the conventional SSD model.
//!
//! Slots come from the per-CPU cluster allocator; a swap-out writes its slot's LBA
//! (writes of one reclaim batch to consecutive slots merge into one command, as the
//! block layer's plugging merges them); freed slots reach the SSD only as the discard
//! mode allows (TRIM commands, each charged to the discard worker's CPU); a fault reads
//! the slot plus the adaptive readahead window (`swapin_nr_pages`, page-cluster 3); the
//! swap cache keeps a swapped-in page's slot until the utilization cutoff
//! (`vm_swap_full`, 50 % unless an experiment moves it, Fig. 4).

use znswap_flash::{BlockConfig, BlockConfigError, BlockSsd};
use znswap_linux_swap::{
    ConfigError as SwapConfigError, Discard, SlotState, SwapConfig, SwapDevice, SwapIn, SwapinReadahead,
};

use crate::backend::{Backend, BackendCounters, Io, KernelThread, Notice, PageId, SwapOutStart};
use crate::calib::CpuCosts;
use crate::events::Ns;
use crate::slab::Slab;

const NO_SLOT: u32 = u32::MAX;
const NO_PAGE: PageId = PageId::MAX;

/// Page states the back end keeps besides the slot.
const IN_WRITEBACK: u8 = 1;
const DIRTIED_IN_WRITEBACK: u8 = 2;
const FREED_IN_WRITEBACK: u8 = 4;

#[derive(Clone, Debug)]
pub struct LinuxSetup {
    pub device: BlockConfig,
    pub discard: Discard,
    pub cpus: u32,
    /// Usable swap slots (the area has one more: the header).
    pub swap_pages: u64,
    /// Host pages (the page-to-slot table's size).
    pub host_pages: u64,
    /// Swap cache cutoff as a fraction of slots in use (Linux: 0.5, `vm_swap_full`).
    pub swap_full_cutoff: f64,
    pub page_cluster: u32,
    pub seed: u64,
    pub costs: CpuCosts,
    /// Write every LBA once before the run (the paper's ramp-up to steady state,
    /// SNIA PTS preconditioning) so the device starts with no unwritten space.
    pub precondition: bool,
}

/// Why the Linux back end cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinuxBackendError {
    #[error("the block SSD model's configuration")]
    Device(#[from] BlockConfigError),
    #[error("the Linux swap model's configuration")]
    Swap(#[from] SwapConfigError),
    #[error("swap cache cutoff {cutoff} must be within 0..=1")]
    SwapFullCutoff { cutoff: f64 },
}

enum Pending {
    Write { first_slot: u64, slots: u32 },
    Read { page: PageId, slot: u64 },
}

pub struct LinuxBackend {
    swap: SwapDevice,
    ssd: BlockSsd,
    page_slot: Vec<u32>,
    page_state: Vec<u8>,
    slot_page: Vec<PageId>,
    slot_version: Vec<u32>,
    writes: Vec<u64>,
    pending: Slab<Pending>,
    readahead_history: SwapinReadahead,
    discards: Vec<(u64, u32)>,
    reclaimed: Vec<u64>,
    slots_scratch: Vec<u64>,
    cutoff_slots: u64,
    costs: CpuCosts,
    swap_out_pages_written: u64,
    swap_in_pages_read: u64,
    trim_commands: u64,
    trim_pages: u64,
    start_ns: Ns,
    pub violations: Vec<String>,
}

impl LinuxBackend {
    pub fn new(setup: LinuxSetup) -> Result<LinuxBackend, LinuxBackendError> {
        let slots = setup.swap_pages + 1;
        let mut device = setup.device;
        device.logical_pages = slots;
        let mut ssd = BlockSsd::new(device)?;
        let mut config = SwapConfig::new(slots, setup.cpus, setup.discard);
        config.page_cluster = setup.page_cluster;
        config.seed = setup.seed;
        let swap = SwapDevice::with_config(config)?;
        if !(0.0..=1.0).contains(&setup.swap_full_cutoff) {
            return Err(LinuxBackendError::SwapFullCutoff { cutoff: setup.swap_full_cutoff });
        }
        let mut start_ns = 0;
        if setup.precondition {
            // Sequential 1 MiB writes over the whole area; the run starts once the
            // device has absorbed them.
            let mut lpn = 0;
            while lpn < slots {
                let pages = (slots - lpn).min(256) as u32;
                start_ns = start_ns.max(ssd.write(0, lpn, pages));
                lpn += pages as u64;
            }
        }
        Ok(LinuxBackend {
            cutoff_slots: (setup.swap_full_cutoff * swap.total_swap_pages() as f64) as u64,
            swap,
            ssd,
            page_slot: vec![NO_SLOT; setup.host_pages as usize],
            page_state: vec![0; setup.host_pages as usize],
            slot_page: vec![NO_PAGE; slots as usize],
            slot_version: vec![0; slots as usize],
            writes: Vec::with_capacity(64),
            pending: Slab::default(),
            readahead_history: SwapinReadahead::default(),
            discards: Vec::new(),
            reclaimed: Vec::new(),
            slots_scratch: Vec::new(),
            costs: setup.costs,
            swap_out_pages_written: 0,
            swap_in_pages_read: 0,
            trim_commands: 0,
            trim_pages: 0,
            start_ns,
            violations: Vec::new(),
        })
    }

    /// When the preconditioning writes are done: the host starts here.
    pub fn start_ns(&self) -> Ns {
        self.start_ns
    }

    pub fn ssd(&self) -> &BlockSsd {
        &self.ssd
    }

    pub fn swap(&self) -> &SwapDevice {
        &self.swap
    }

    fn violation(&mut self, message: String) {
        if self.violations.len() < 32 {
            self.violations.push(message);
        }
    }

    /// Releases a slot in the model and forgets its page; TRIMs follow per the mode.
    fn release_slot(&mut self, io: &mut Io, page: PageId) {
        let slot = self.page_slot[page as usize];
        if slot == NO_SLOT {
            return;
        }
        self.page_slot[page as usize] = NO_SLOT;
        self.slot_page[slot as usize] = NO_PAGE;
        self.swap.free(slot as u64);
        self.issue_discards(io);
    }

    /// TRIMs for whatever the discard mode released, each a command of the discard
    /// worker's CPU time.
    fn issue_discards(&mut self, io: &mut Io) {
        self.swap.take_discards(&mut self.discards);
        for index in 0..self.discards.len() {
            let (first, slots) = self.discards[index];
            self.ssd.trim(io.now, first, slots);
            self.trim_commands += 1;
            self.trim_pages += slots as u64;
            io.kernel_work(KernelThread::Discard, self.costs.trim_ns);
        }
        self.discards.clear();
    }

    /// Swap-cached slots the allocator took back: their pages no longer have a copy.
    fn forget_reclaimed(&mut self) {
        self.swap.take_reclaimed(&mut self.reclaimed);
        for index in 0..self.reclaimed.len() {
            let slot = self.reclaimed[index];
            let page = self.slot_page[slot as usize];
            if page != NO_PAGE && self.page_slot[page as usize] == slot as u32 {
                self.page_slot[page as usize] = NO_SLOT;
            }
            self.slot_page[slot as usize] = NO_PAGE;
        }
        self.reclaimed.clear();
    }

    fn write_completed(&mut self, io: &mut Io, first_slot: u64, slots: u32) {
        for slot in first_slot..first_slot + slots as u64 {
            let page = self.slot_page[slot as usize];
            if page == NO_PAGE {
                self.violation(format!("slot {slot}: write completed with no page"));
                continue;
            }
            let state = self.page_state[page as usize];
            self.page_state[page as usize] = 0;
            self.swap_out_pages_written += 1;
            if state & FREED_IN_WRITEBACK != 0 {
                self.release_slot(io, page);
                continue;
            }
            if state & DIRTIED_IN_WRITEBACK != 0 {
                // Written to while in flight: the page stays, its new copy is stale.
                self.release_slot(io, page);
                io.notify(Notice::SwapOutDone { page, swapped: false, written: true });
                continue;
            }
            io.notify(Notice::SwapOutDone { page, swapped: true, written: true });
        }
    }

    fn read_completed(&mut self, io: &mut Io, page: PageId, slot: u64) {
        if self.page_slot[page as usize] != slot as u32 {
            self.violation(format!("page {page}: read of slot {slot} completed after the slot changed"));
        }
        let version = self.slot_version[slot as usize];
        // The swap cache rule: keep the slot below the cutoff. The model applies Linux's
        // fixed 50 %; another cutoff is applied around it (see README: a cutoff above
        // 50 % keeps such slots in the model's `Swapped` state while the page is in
        // memory, which frees the same way).
        let full = self.swap.used() > self.cutoff_slots;
        let cached = if !full && self.swap.swap_full() {
            true
        } else {
            match self.swap.swap_in(slot, false) {
                SwapIn::Cached if full => {
                    self.release_slot(io, page);
                    false
                }
                SwapIn::Cached => true,
                SwapIn::Freed => {
                    self.page_slot[page as usize] = NO_SLOT;
                    self.slot_page[slot as usize] = NO_PAGE;
                    self.issue_discards(io);
                    false
                }
            }
        };
        io.notify(Notice::SwapInDone { page, version, cached });
    }

    fn read_slot(&mut self, io: &mut Io, page: PageId) {
        let slot = self.page_slot[page as usize];
        if slot == NO_SLOT {
            self.violation(format!("page {page}: swap-in of a page with no slot"));
            io.notify(Notice::SwapInDone { page, version: u32::MAX, cached: false });
            return;
        }
        let done = self.ssd.read(io.now, slot as u64, 1);
        self.swap_in_pages_read += 1;
        let token = self.pending.insert(Pending::Read { page, slot: slot as u64 });
        io.complete_at(done, token);
    }
}

impl Backend for LinuxBackend {
    fn name(&self) -> String {
        match self.swap.config().discard {
            Discard::None => "linux".into(),
            Discard::Pages => "linux+trim512".into(),
            Discard::Fine8 => "linux+trim8".into(),
        }
    }

    fn swap_out(&mut self, io: &mut Io, cpu: u32, page: PageId, version: u32) -> SwapOutStart {
        let slot = self.page_slot[page as usize];
        if slot != NO_SLOT {
            // A clean page whose slot still holds its data: unmap, no write.
            if self.swap.state(slot as u64) == SlotState::Cached {
                self.swap.evict_cached(slot as u64);
            }
            io.notify(Notice::SwapOutDone { page, swapped: true, written: false });
            return SwapOutStart::Started;
        }
        let cpu = cpu % self.swap.config().cpus;
        let allocated = self.swap.alloc(cpu);
        // Even a failed allocation may have reclaimed swap-cached slots (and scheduled a
        // cluster's discard): their pages lose the copy either way.
        self.forget_reclaimed();
        // TRIMs the allocator released go before the write of the new slot.
        self.issue_discards(io);
        let Some(slot) = allocated else { return SwapOutStart::Busy };
        self.page_slot[page as usize] = slot as u32;
        self.page_state[page as usize] = IN_WRITEBACK;
        self.slot_page[slot as usize] = page;
        self.slot_version[slot as usize] = version;
        self.writes.push(slot);
        SwapOutStart::Started
    }

    fn flush(&mut self, io: &mut Io) {
        if self.writes.is_empty() {
            return;
        }
        self.writes.sort_unstable();
        let mut index = 0;
        while index < self.writes.len() {
            let first = self.writes[index];
            let mut count = 1;
            while index + count < self.writes.len() && self.writes[index + count] == first + count as u64 && count < 256
            {
                count += 1;
            }
            let done = self.ssd.write(io.now, first, count as u32);
            let token = self.pending.insert(Pending::Write { first_slot: first, slots: count as u32 });
            io.complete_at(done, token);
            index += count;
        }
        self.writes.clear();
    }

    fn swap_in(&mut self, io: &mut Io, _cpu: u32, page: PageId, readahead: &mut Vec<PageId>) {
        let slot = self.page_slot[page as usize];
        if slot != NO_SLOT && self.swap.state(slot as u64) == SlotState::Swapped {
            self.slots_scratch.clear();
            self.swap.readahead_adaptive(&mut self.readahead_history, slot as u64, &mut self.slots_scratch);
            for &ahead in &self.slots_scratch {
                let ahead_page = self.slot_page[ahead as usize];
                if ahead != slot as u64 && ahead_page != NO_PAGE {
                    readahead.push(ahead_page);
                }
            }
        }
        self.read_slot(io, page);
    }

    fn read_ahead(&mut self, io: &mut Io, page: PageId) {
        self.read_slot(io, page);
    }

    fn readahead_hit(&mut self) {
        self.readahead_history.hit();
    }

    fn dirtied(&mut self, io: &mut Io, page: PageId) {
        if self.page_state[page as usize] & IN_WRITEBACK != 0 {
            self.page_state[page as usize] |= DIRTIED_IN_WRITEBACK;
            return;
        }
        self.release_slot(io, page);
    }

    fn free(&mut self, io: &mut Io, page: PageId) {
        if self.page_state[page as usize] & IN_WRITEBACK != 0 {
            self.page_state[page as usize] |= FREED_IN_WRITEBACK;
            return;
        }
        self.release_slot(io, page);
    }

    fn complete(&mut self, io: &mut Io, token: u64) {
        match self.pending.take(token) {
            Some(Pending::Write { first_slot, slots }) => self.write_completed(io, first_slot, slots),
            Some(Pending::Read { page, slot }) => self.read_completed(io, page, slot),
            None => self.violation(format!("unknown completion token {token}")),
        }
    }

    fn tick(&mut self, _io: &mut Io) {}

    fn counters(&self) -> BackendCounters {
        let media = self.ssd.counters();
        BackendCounters {
            swap_out_pages_written: self.swap_out_pages_written,
            swap_in_pages_read: self.swap_in_pages_read,
            media_pages_written: media.media_pages_written,
            device_host_pages_written: media.host_pages_written,
            host_gc_pages_written: 0,
            host_gc_pages_read: 0,
            host_gc_victims: 0,
            trim_commands: self.trim_commands,
            trim_pages: self.trim_pages,
            erases: media.erases,
            slots_used: self.swap.used(),
            device_live_pages: self.ssd.live_pages(),
            slots_capacity: self.swap.total_swap_pages(),
            records_rejected: 0,
        }
    }

    fn check(&mut self) -> Vec<String> {
        let swap = &self.swap;
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| swap.check_invariants())) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            self.violation(format!("linux swap invariant: {message}"));
        }
        self.violations.clone()
    }
}
