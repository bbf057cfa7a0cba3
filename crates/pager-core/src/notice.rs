//! What the user should hear about, once: the budget giving way (swap full, or room
//! too slow to come) and a tenant at its swap limit. The core says each notice once in
//! its life (`budget_overruns` and `swap_limit_overruns` count every fault concerned);
//! the shell takes it after a call (`PagerCore::take_notice`) and tells the user.

use crate::fault::ROOM_WAIT_MAX_NS;
use crate::PAGE_BYTES;

/// Something the user should hear about, once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Swap is full: the working set does not fit the budget plus the device, and the
    /// resident set grows past the budget.
    SwapFull,
    /// A fault waited too long for room (`ROOM_WAIT_MAX_NS`): swap-out did not keep up,
    /// and the resident set went past the budget. With the device's empty zones then,
    /// which tell a nearly full device whose GC wins back little from slow writes or
    /// pager threads kept from a CPU (seen: the message blamed a full device with 70 of
    /// 80 zones empty).
    RoomTooSlow { empty_zones: u32, zones: u32 },
    /// A tenant reached its swap limit (`set_tenant_swap_limit`): its resident set grows
    /// past its budget.
    TenantSwapFull { tenant: u32, slots: u64 },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::SwapFull => write!(
                f,
                "the swap device is full (nothing left for the GC to reclaim): the working set does not fit the \
                 memory budget plus the device, so the resident set now grows past the budget; use a larger \
                 device or a larger budget"
            ),
            // A device an eighth empty or less is where the GC's copies slow swap-out.
            Notice::RoomTooSlow { empty_zones, zones } if empty_zones * 8 <= *zones => write!(
                f,
                "swap-out cannot make room fast enough: the device is nearly full ({empty_zones} of {zones} zones \
                 empty) and its GC wins back little, so the resident set grows past the budget; use a larger \
                 device or a larger budget"
            ),
            Notice::TenantSwapFull { tenant, slots } => write!(
                f,
                "tenant {tenant} reached its swap limit ({} MiB on the device): its pages stay in memory, past its \
                 memory budget, until some of its swapped pages are read back or freed; give it a larger swap limit \
                 or more memory",
                (slots * PAGE_BYTES as u64) >> 20
            ),
            Notice::RoomTooSlow { empty_zones, zones } => write!(
                f,
                "a fault waited over {} ms for room: swap-out did not keep up, though the device has room \
                 ({empty_zones} of {zones} zones empty): its writes were slow, or the pager's threads did not get \
                 a CPU; the resident set went past the budget meanwhile (counted as budget overruns)",
                ROOM_WAIT_MAX_NS / 1_000_000
            ),
        }
    }
}

/// The notice owed to the user, and whether the budget's giving way was said.
#[derive(Debug, Default)]
pub(crate) struct Notices {
    /// Taken by `PagerCore::take_notice`.
    owed: Option<Notice>,
    /// The budget's giving way has been said (`SwapFull` or `RoomTooSlow`).
    budget_said: bool,
}

impl Notices {
    pub(crate) fn say(&mut self, notice: Notice) {
        self.owed = Some(notice);
    }

    /// Whether the budget's giving way is still to be said: true once.
    pub(crate) fn budget_unsaid(&mut self) -> bool {
        !std::mem::replace(&mut self.budget_said, true)
    }

    pub(crate) fn take(&mut self) -> Option<Notice> {
        self.owed.take()
    }
}

#[cfg(test)]
mod tests {
    use super::Notice;

    /// A long wait for room blames a full device only when the device is nearly full.
    #[test]
    fn a_slow_swap_out_names_its_cause() {
        let full = Notice::RoomTooSlow { empty_zones: 3, zones: 80 }.to_string();
        assert!(full.contains("nearly full (3 of 80 zones empty)"), "{full}");
        let slow = Notice::RoomTooSlow { empty_zones: 70, zones: 80 }.to_string();
        assert!(!slow.contains("nearly full") && slow.contains("70 of 80 zones empty"), "{slow}");
        assert!(slow.contains("over 50 ms"), "{slow}");
    }
}
