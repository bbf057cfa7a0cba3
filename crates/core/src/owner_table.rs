//! The owner table: the user-space page table. One `u64` per registered owner page, as a
//! kernel PTE exists per application page; there is no reverse table (slot -> owner) in
//! host memory: the reverse map lives on the device (see `record`).
//!
//! Entry layout (bit 63 first):
//! ```text
//! 63..61  state tag (3 bits, `PageState`)
//! 60..45  access history: 16-sample shift register (hot/cold policy)
//! 44..36  history epoch mod 512 of the last shift
//! 35..0   slot address (zone * zone capacity + slot) or swap-out ticket
//! ```
//!
//! The epoch needs the 9 bits: a cold page stays swapped out for hundreds of epochs, and
//! with 5 bits (mod 32) one back after 32 to 47 epochs kept the history of its last
//! access as if it were recent, so cold pages looked warm. 36 address bits still name
//! 2^36 slots (256 TiB of swap).

use serde::Serialize;

use crate::slot_map::SlotAddress;

pub const ADDRESS_BITS: u32 = 36;
const ADDRESS_MASK: u64 = (1 << ADDRESS_BITS) - 1;
const EPOCH_SHIFT: u32 = 36;
const EPOCH_MASK: u64 = 511;
const HISTORY_SHIFT: u32 = 45;
const TAG_SHIFT: u32 = 61;

/// What the engine knows of one owner page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PageState {
    /// Never written (or freed): reads as zeros.
    Zero,
    /// In memory, no copy on the device.
    Resident,
    /// In memory, an append carrying it is queued or in flight (the ticket).
    SwapOutInFlight { ticket: u64, dirtied: bool },
    /// Only copy at this slot.
    Swapped { address: SlotAddress },
    /// In memory and clean; the slot keeps an identical copy (swap cache).
    SwapCached { address: SlotAddress },
    /// A swap-in read of this slot is in flight.
    SwapInFlight { address: SlotAddress },
    /// The device destroyed the only copy.
    Lost,
}

impl PageState {
    fn encode(self) -> (u64, u64) {
        match self {
            PageState::Zero => (0, 0),
            PageState::Resident => (1, 0),
            PageState::SwapOutInFlight { ticket, dirtied: false } => (2, ticket),
            PageState::SwapOutInFlight { ticket, dirtied: true } => (3, ticket),
            PageState::Swapped { address } => (4, address.0),
            PageState::SwapCached { address } => (5, address.0),
            PageState::SwapInFlight { address } => (6, address.0),
            PageState::Lost => (7, 0),
        }
    }

    fn decode(tag: u64, address: u64) -> PageState {
        match tag {
            0 => PageState::Zero,
            1 => PageState::Resident,
            2 => PageState::SwapOutInFlight { ticket: address, dirtied: false },
            3 => PageState::SwapOutInFlight { ticket: address, dirtied: true },
            4 => PageState::Swapped { address: SlotAddress(address) },
            5 => PageState::SwapCached { address: SlotAddress(address) },
            6 => PageState::SwapInFlight { address: SlotAddress(address) },
            _ => PageState::Lost,
        }
    }

    /// The address of the slot this state points at, if any.
    pub fn address(self) -> Option<SlotAddress> {
        match self {
            PageState::Swapped { address }
            | PageState::SwapCached { address }
            | PageState::SwapInFlight { address } => Some(address),
            _ => None,
        }
    }
}

struct Owner {
    tenant: u16,
    entries: Vec<u64>,
}

/// Owner errors: a bad owner or page is a driver bug, reported rather than trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OwnerError {
    #[error("owner {owner} is not registered")]
    Unknown { owner: u32 },
    #[error("owner {owner} is already registered")]
    Registered { owner: u32 },
    #[error("owner id {owner} beyond owners_max {owners_max}")]
    OutOfRange { owner: u32, owners_max: u32 },
    #[error("page {page} beyond owner {owner}'s {pages} pages")]
    Page { owner: u32, page: u64, pages: u64 },
    #[error("tenant {tenant} beyond tenants_max {tenants_max}")]
    Tenant { tenant: u32, tenants_max: u32 },
}

pub struct OwnerTable {
    owners: Vec<Option<Owner>>,
    tenants_max: u32,
    pages_registered: u64,
}

impl OwnerTable {
    pub fn new(owners_max: u32, tenants_max: u32) -> OwnerTable {
        OwnerTable { owners: (0..owners_max).map(|_| None).collect(), tenants_max, pages_registered: 0 }
    }

    /// Registers an owner (a process or region) of `pages` pages, all Zero. Allocates
    /// its entries: registration is not on the fault path.
    pub fn register(&mut self, owner: u32, pages: u64, tenant: u32) -> Result<(), OwnerError> {
        let owners_max = self.owners.len() as u32;
        let entry = self.owners.get_mut(owner as usize).ok_or(OwnerError::OutOfRange { owner, owners_max })?;
        if entry.is_some() {
            return Err(OwnerError::Registered { owner });
        }
        if tenant >= self.tenants_max {
            return Err(OwnerError::Tenant { tenant, tenants_max: self.tenants_max });
        }
        if pages > crate::record::PAGE_INDEX_MAX + 1 {
            return Err(OwnerError::Page { owner, page: pages, pages: crate::record::PAGE_INDEX_MAX + 1 });
        }
        *entry = Some(Owner { tenant: tenant as u16, entries: vec![0; pages as usize] });
        self.pages_registered += pages;
        Ok(())
    }

    /// Forgets a registered owner; its id may be registered again.
    pub fn unregister(&mut self, owner: u32) -> Result<(), OwnerError> {
        let entry = self.owners.get_mut(owner as usize).and_then(Option::take).ok_or(OwnerError::Unknown { owner })?;
        self.pages_registered -= entry.entries.len() as u64;
        Ok(())
    }

    fn owner(&self, owner: u32) -> Result<&Owner, OwnerError> {
        self.owners.get(owner as usize).and_then(Option::as_ref).ok_or(OwnerError::Unknown { owner })
    }

    pub fn check(&self, owner: u32, page: u64) -> Result<(), OwnerError> {
        let entry = self.owner(owner)?;
        let pages = entry.entries.len() as u64;
        if page >= pages {
            return Err(OwnerError::Page { owner, page, pages });
        }
        Ok(())
    }

    pub fn pages(&self, owner: u32) -> Result<u64, OwnerError> {
        Ok(self.owner(owner)?.entries.len() as u64)
    }

    pub fn tenant(&self, owner: u32) -> u16 {
        self.owners[owner as usize].as_ref().expect("registered").tenant
    }

    /// State of a page already checked with [`OwnerTable::check`].
    pub fn get(&self, owner: u32, page: u64) -> PageState {
        let entry = self.raw(owner, page);
        PageState::decode(entry >> TAG_SHIFT, entry & ADDRESS_MASK)
    }

    fn raw(&self, owner: u32, page: u64) -> u64 {
        self.owners[owner as usize].as_ref().expect("registered").entries[page as usize]
    }

    fn raw_mut(&mut self, owner: u32, page: u64) -> &mut u64 {
        &mut self.owners[owner as usize].as_mut().expect("registered").entries[page as usize]
    }

    /// Sets the state, keeping the access history.
    pub fn set(&mut self, owner: u32, page: u64, state: PageState) {
        let (tag, address) = state.encode();
        assert!(address <= ADDRESS_MASK);
        let entry = self.raw_mut(owner, page);
        let keep = *entry & !(ADDRESS_MASK | (7 << TAG_SHIFT));
        *entry = keep | tag << TAG_SHIFT | address;
    }

    /// Compare-and-set: the GC's activate stage remaps only if the owner still points
    /// where the GC found it.
    pub fn compare_and_set(&mut self, owner: u32, page: u64, expected: PageState, new: PageState) -> bool {
        if self.get(owner, page) != expected {
            return false;
        }
        self.set(owner, page, new);
        true
    }

    /// The 16-sample access history, shifted forward to `epoch` (empty samples for the
    /// epochs in between) and, if `accessed`, with the newest sample set.
    pub fn touch_history(&mut self, owner: u32, page: u64, epoch: u64, accessed: bool) -> u16 {
        let entry = self.raw_mut(owner, page);
        let last = (*entry >> EPOCH_SHIFT) & EPOCH_MASK;
        let gap = (epoch.wrapping_sub(last)) & EPOCH_MASK;
        let mut history = ((*entry >> HISTORY_SHIFT) & 0xffff) as u32;
        history = if gap >= 16 { 0 } else { (history << gap) & 0xffff };
        if accessed {
            history |= 1;
        }
        *entry = (*entry & !((0xffff << HISTORY_SHIFT) | (EPOCH_MASK << EPOCH_SHIFT)))
            | (history as u64) << HISTORY_SHIFT
            | (epoch & EPOCH_MASK) << EPOCH_SHIFT;
        history as u16
    }

    /// The access history as of `epoch`, without recording a sample.
    pub fn history(&self, owner: u32, page: u64, epoch: u64) -> u16 {
        let entry = self.raw(owner, page);
        let last = (entry >> EPOCH_SHIFT) & EPOCH_MASK;
        let gap = epoch.wrapping_sub(last) & EPOCH_MASK;
        let history = ((entry >> HISTORY_SHIFT) & 0xffff) as u32;
        if gap >= 16 {
            0
        } else {
            ((history << gap) & 0xffff) as u16
        }
    }

    /// Bytes the entries take: 8 per registered page.
    pub fn host_bytes(&self) -> u64 {
        self.pages_registered * 8 + self.owners.len() as u64 * std::mem::size_of::<Option<Owner>>() as u64
    }

    pub fn owners_max(&self) -> u32 {
        self.owners.len() as u32
    }

    pub fn is_registered(&self, owner: u32) -> bool {
        self.owner(owner).is_ok()
    }

    /// The (owner, page) whose entry points at the slot at `address`: the slow recovery
    /// path when a record cannot be trusted. Linear in registered pages; never on the
    /// hot path.
    pub fn owner_of(&self, address: SlotAddress) -> Option<(u32, u64)> {
        for (owner, entry) in self.owners.iter().enumerate() {
            let Some(entry) = entry else { continue };
            for (page, raw) in entry.entries.iter().enumerate() {
                if PageState::decode(raw >> TAG_SHIFT, raw & ADDRESS_MASK).address() == Some(address) {
                    return Some((owner as u32, page as u64));
                }
            }
        }
        None
    }

    /// Calls `visit` for every registered page (invariant checks in tests and DST).
    pub fn for_each(&self, mut visit: impl FnMut(u32, u64, PageState)) {
        for (owner, entry) in self.owners.iter().enumerate() {
            let Some(entry) = entry else { continue };
            for (page, raw) in entry.entries.iter().enumerate() {
                visit(owner as u32, page as u64, PageState::decode(raw >> TAG_SHIFT, raw & ADDRESS_MASK));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_keep_history() {
        let mut table = OwnerTable::new(4, 2);
        table.register(1, 10, 1).unwrap();
        assert_eq!(table.register(1, 10, 1), Err(OwnerError::Registered { owner: 1 }));
        assert!(table.check(1, 10).is_err());
        assert!(table.check(2, 0).is_err());
        assert_eq!(table.get(1, 3), PageState::Zero);
        table.touch_history(1, 3, 5, true);
        let states = [
            PageState::Resident,
            PageState::SwapOutInFlight { ticket: ADDRESS_MASK, dirtied: true },
            PageState::SwapOutInFlight { ticket: 7, dirtied: false },
            PageState::Swapped { address: SlotAddress(123_456_789) },
            PageState::SwapCached { address: SlotAddress(1) },
            PageState::SwapInFlight { address: SlotAddress(0) },
            PageState::Lost,
            PageState::Zero,
        ];
        for state in states {
            table.set(1, 3, state);
            assert_eq!(table.get(1, 3), state);
        }
        assert_eq!(table.touch_history(1, 3, 7, true), 0b101);
        assert!(!table.compare_and_set(1, 3, PageState::Resident, PageState::Lost));
        assert!(table.compare_and_set(1, 3, PageState::Zero, PageState::Swapped { address: SlotAddress(9) }));
        assert_eq!(table.owner_of(SlotAddress(9)), Some((1, 3)));
        assert_eq!(table.touch_history(1, 3, 30, false), 0);
    }

    #[test]
    fn a_page_back_after_many_epochs_has_no_history() {
        let mut table = OwnerTable::new(1, 1);
        table.register(0, 1, 0).unwrap();
        table.set(0, 0, PageState::Swapped { address: SlotAddress((1 << ADDRESS_BITS) - 1) });
        assert_eq!(table.touch_history(0, 0, 100, true), 1);
        // 40 epochs later (8 past a 5-bit epoch's wrap) the old access is long gone.
        assert_eq!(table.history(0, 0, 140), 0);
        assert_eq!(table.touch_history(0, 0, 140, true), 1);
        // 3 epochs later it is three samples back; the address is untouched.
        assert_eq!(table.history(0, 0, 143), 0b1000);
        assert_eq!(table.get(0, 0), PageState::Swapped { address: SlotAddress((1 << ADDRESS_BITS) - 1) });
    }
}
