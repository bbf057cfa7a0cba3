//! A page's state as the pager sees it: whether it is mapped, and what the pager is
//! doing with it. What is on the device (never written, swapped, swap-cached, lost) is
//! the engine's `znswap_core::PageState`; a page's whole state is the pair, drawn in
//! the crate's README.

use serde::Serialize;

/// The pager's state of one region page. One byte per page, as a PTE is per page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum PageState {
    /// No page table entry: never written, swapped out, or freed (the engine says
    /// which). The next access faults.
    Unmapped,
    /// Mapped; its reference bit clear (the CLOCK hand passed it, or it was kept after
    /// a failed eviction). Write-protected when clean (swap cache) or sampled.
    Resident,
    /// Mapped, referenced since the hand last passed.
    Referenced,
    /// Picked by evictor round `by`, being write-protected, not yet handed to the
    /// engine. A write meanwhile takes it back (`Referenced`). The round is named: with
    /// two evictors, a page taken back from one round may be picked by the other before
    /// the first hands over, and the first must not mistake it for its own victim (found
    /// by the pager DST: the first round's zero check, taken before the write, dropped
    /// the page as all zero).
    Evicting { by: u8 },
    /// Picked by evictor round `by` to be parked: moved out of the program's reach
    /// (`UFFDIO_MOVE` to its shadow page, outside the state lock), or, where the kernel
    /// refuses the move (a page shared with a fork's child), evicted in place as the
    /// round's `Evicting` victim. Either way where its bytes are is only known once the
    /// round's moves are settled (`PagerCore::park_settle`): a fault on it waits for that.
    Parking { by: u8 },
    /// A `Parking` page the program discarded before its round's moves were settled. The move
    /// runs outside the state lock, so it may come before the kernel's zap (it took the
    /// old data to the shadow page) or after it (it found nothing): a fault on it still
    /// waits for the moves to be settled, so no page the program maps and writes after
    /// the zap can be taken by the move. The settling drops what the move took and
    /// makes it `Removed`.
    ParkingRemoved,
    /// On the inactive list: moved to its shadow page, out of the program's reach and
    /// still in memory. A touch (read or write) is a missing fault that moves it back
    /// (no device I/O) and marks it referenced: the pager sees reads. The oldest parked
    /// pages are the ones written out.
    Parked,
    /// Handed to the engine from its shadow page, where the append reads it. The program
    /// cannot write it, so Appendix A's race cannot happen; a touch copies it back and
    /// aborts the swap-out.
    WritingParked,
    /// Handed to the engine: an append carrying it is queued or in flight; mapped and
    /// write-protected, so a write faults and aborts the swap-out (Appendix A).
    Writing,
    /// Written out (or all zero): no longer the pager's, but still mapped,
    /// write-protected, until a discard (`MADV_DONTNEED`) outside the lock. A fault on
    /// it waits for the discard.
    Dropping,
    /// The device lost its only copy: a poison marker, so a touch raises SIGBUS.
    Poisoned,
    /// The program discarded it (`MADV_DONTNEED` and kin: a userfaultfd REMOVE event)
    /// while something was mapped there: what was mapped (its old data, a poison marker)
    /// stays until the kernel zaps it, after the event was read, at a time the pager
    /// never learns. Not the pager's; the engine holds nothing (a zero entry), and the
    /// page reads zero once zapped. The pager never trusts, writes out or maps over the
    /// old entry: a missing fault asks the shell to map zeroes only if nothing is mapped
    /// (`FaultStep::ZeroFill`), and only a page that landed is the pager's again.
    Removed,
}

/// Evictor rounds a page byte can name (`Evicting { by }` and `Parking { by }`, `by`
/// below this).
pub(crate) const ROUNDS_MAX: u8 = PARKING - EVICTING;

/// `Evicting { by }` is this plus `by` in a region's byte.
const EVICTING: u8 = 16;
/// `Parking { by }` is this plus `by`.
const PARKING: u8 = 136;

impl PageState {
    /// The byte a region keeps for a page. `Unmapped` is 0, so a region's table starts
    /// as zeroed memory the kernel maps only as it is written: a 8 GiB arena's 2M pages
    /// cost nothing resident until they are used.
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            PageState::Unmapped => 0,
            PageState::Resident => 1,
            PageState::Referenced => 2,
            PageState::Writing => 3,
            PageState::Dropping => 4,
            PageState::Poisoned => 5,
            PageState::Removed => 6,
            PageState::Parked => 7,
            PageState::WritingParked => 8,
            PageState::ParkingRemoved => 9,
            PageState::Evicting { by } => {
                assert!(by < ROUNDS_MAX, "evictor round {by} beyond a page byte's");
                EVICTING + by
            }
            PageState::Parking { by } => {
                assert!(by < ROUNDS_MAX, "evictor round {by} beyond a page byte's");
                PARKING + by
            }
        }
    }

    pub(crate) fn from_byte(byte: u8) -> PageState {
        match byte {
            0 => PageState::Unmapped,
            1 => PageState::Resident,
            2 => PageState::Referenced,
            3 => PageState::Writing,
            4 => PageState::Dropping,
            5 => PageState::Poisoned,
            6 => PageState::Removed,
            7 => PageState::Parked,
            8 => PageState::WritingParked,
            9 => PageState::ParkingRemoved,
            by if (EVICTING..PARKING).contains(&by) => PageState::Evicting { by: by - EVICTING },
            by if by >= PARKING && by - PARKING < ROUNDS_MAX => PageState::Parking { by: by - PARKING },
            other => panic!("page byte {other} names no state"),
        }
    }

    /// Counted in the resident set and owned by the pager (`Dropping` pages are counted
    /// too until discarded, but belong to the device already). Parked pages are in
    /// memory, at their shadow address.
    pub fn is_resident(self) -> bool {
        matches!(
            self,
            PageState::Resident
                | PageState::Referenced
                | PageState::Evicting { .. }
                | PageState::Writing
                | PageState::Parking { .. }
                | PageState::Parked
                | PageState::WritingParked
        )
    }

    /// Whether the page counts in the resident set: resident, or dropped but not yet
    /// discarded (`stats.resident_pages` counts the same).
    pub fn counts_resident(self) -> bool {
        self.is_resident() || self == PageState::Dropping
    }

    /// Whether the page is resident and not on its way out (neither being written nor
    /// dropped): what counts as pressure on a tenant's own budget, as resident pages
    /// less those written and dropped count on the pager's.
    pub fn is_kept(self) -> bool {
        self.is_resident() && !matches!(self, PageState::Writing | PageState::WritingParked)
    }

    /// Whether the page's bytes are (or may be, while `Parking`) at its shadow address,
    /// nothing mapped at its own.
    pub fn is_parked(self) -> bool {
        matches!(self, PageState::Parking { .. } | PageState::Parked | PageState::WritingParked)
    }

    /// Whether a fault on it waits for its round's moves to be settled
    /// (`PagerCore::park_settle`): where its bytes are (here, at the shadow, or gone with
    /// the program's discard) is known then.
    pub fn awaits_settling(self) -> bool {
        matches!(self, PageState::Parking { .. } | PageState::ParkingRemoved)
    }

    /// Whether the pager moves a page from `self` to `to`. Every change of a page's
    /// state is checked against this list (`PagerCore::set_state`); staying in a state
    /// is not a transition.
    pub fn may_become(self, to: PageState) -> bool {
        use PageState::{
            Dropping, Evicting, Parked, Parking, ParkingRemoved, Poisoned, Referenced, Removed, Resident, Unmapped,
            Writing, WritingParked,
        };
        matches!(
            (self, to),
            // A fault installs it: swap-in, zero fill, read-ahead (unreferenced where
            // the pager parks: the inactive list judges it).
            (Unmapped, Referenced | Resident)
            // Its only copy is gone.
            | (Unmapped, Poisoned)
            // A write fault on it, or on a sampled page of its granule.
            | (Resident, Referenced)
            // The CLOCK hand cleared its bit.
            | (Referenced, Resident)
            // Picked as a victim.
            | (Resident, Evicting { .. })
            // Written while being protected: kept, referenced.
            | (Evicting { .. }, Referenced)
            // Not protected (its region went away) or refused (backpressure): kept.
            | (Evicting { .. }, Resident)
            // Handed to the engine.
            | (Evicting { .. }, Writing)
            // All zero: no write, a zero entry again.
            | (Evicting { .. }, Dropping)
            // Written during its append: the swap-out aborted.
            | (Writing, Referenced)
            // The append failed: kept.
            | (Writing, Resident)
            // Written out (or its clean slot kept: the swap cache).
            | (Writing, Dropping)
            // Discarded.
            | (Dropping, Unmapped)
            // The program discarded it while mapped (Dropping pages stay Dropping: the
            // pager's own discard zaps them, and a fault waits for that, so nothing is
            // mapped where that discard is about to land).
            | (Resident | Referenced | Evicting { .. } | Writing | Poisoned, Removed)
            // Its old entry is gone (a zero page landed where nothing was mapped).
            | (Removed, Referenced | Resident)
            // Picked to be parked.
            | (Resident, Parking { .. })
            // Moved to its shadow page.
            | (Parking { .. }, Parked)
            // Not moved, its shadow page's stale copy not yet discarded (or, with
            // asynchronous write protection, shared with a fork's child): kept.
            | (Parking { .. }, Resident)
            // Not moved: the scan before the move found it written (asynchronous write
            // protection).
            | (Parking { .. }, Referenced)
            // (Refused by the move: evicted in place, as its round's evicting victim; below.)
            // A touch moved it back.
            | (Parked, Referenced)
            // Its turn came: handed to the engine where it is.
            | (Parked, WritingParked)
            // A touch copied it back, writable: its swap-out aborts at completion (the
            // append still reads the shadow page). Or the append failed: parked again.
            | (WritingParked, Writing | Parked)
            // Written out: its shadow page awaits the discard.
            | (WritingParked, Dropping)
            // The program discarded it: its shadow page is discarded too.
            | (Parked | WritingParked, Removed)
            // The program discarded it while the move may be under way: it is the
            // program's zero page once the settling dropped what the move took.
            | (Parking { .. }, ParkingRemoved)
            | (ParkingRemoved, Removed)
        ) || matches!((self, to), (Parking { by: parking }, Evicting { by: evicting }) if parking == evicting)
    }
}

#[cfg(test)]
mod tests {
    use super::PageState::{
        self, Dropping, Evicting, Parked, Parking, ParkingRemoved, Poisoned, Referenced, Removed, Resident, Unmapped,
        Writing, WritingParked,
    };
    use super::ROUNDS_MAX;

    const ALL: [PageState; 15] = [
        Unmapped,
        Resident,
        Referenced,
        Evicting { by: 0 },
        Evicting { by: 1 },
        Writing,
        Dropping,
        Poisoned,
        Removed,
        Parking { by: 0 },
        Parking { by: 1 },
        Parked,
        WritingParked,
        Parking { by: 2 },
        ParkingRemoved,
    ];

    #[test]
    fn every_state_is_reachable_and_every_mapped_state_leaves() {
        for state in ALL {
            if state != Unmapped {
                assert!(ALL.iter().any(|from| from.may_become(state)), "{state:?} cannot be reached");
            }
            if state != Poisoned {
                assert!(ALL.iter().any(|to| state.may_become(*to)), "{state:?} is a dead end");
            }
            assert!(!state.may_become(state), "{state:?} -> itself is not a transition");
            if let Evicting { by } | Parking { by } = state {
                assert!(!state.may_become(Evicting { by: by + 1 }), "one round's victim is never another's");
                assert!(!state.may_become(Parking { by: by + 1 }), "one round's victim is never another's");
            }
        }
        // A page reaches the device only through Writing, and leaves memory only through
        // Dropping (or the program's discard, Removed): nothing jumps from a mapped state
        // straight to Unmapped.
        for from in ALL {
            if from.may_become(Unmapped) {
                assert_eq!(from, Dropping);
            }
        }
        assert!(!Poisoned.may_become(Referenced), "a lost page is never mapped with data again");
        // A page the program discarded is the pager's again only once a zero page landed
        // where its old entry was: never through Unmapped, whose faults map over anything.
        for to in ALL {
            if Removed.may_become(to) {
                assert!(matches!(to, Referenced | Resident), "{to:?}");
            }
        }
        assert!(!Dropping.may_become(Removed), "a page awaiting the pager's discard stays Dropping");
        // A page whose move may be under way is never mapped before the settling.
        for to in ALL {
            if ParkingRemoved.may_become(to) {
                assert_eq!(to, Removed);
            }
        }
        // A parked page is mapped again only by the touch that moves or copies it back
        // (as referenced), and leaves memory only through its discard.
        for parked in [Parked, WritingParked] {
            for to in [Unmapped, Resident, Evicting { by: 0 }, Parking { by: 0 }] {
                assert!(!parked.may_become(to), "{parked:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn every_state_survives_its_byte_and_unmapped_is_zero() {
        assert_eq!(Unmapped.to_byte(), 0);
        let mut states = vec![
            Unmapped,
            Resident,
            Referenced,
            Writing,
            Dropping,
            Poisoned,
            Removed,
            Parked,
            WritingParked,
            ParkingRemoved,
        ];
        states.extend((0..ROUNDS_MAX).map(|by| Evicting { by }));
        states.extend((0..ROUNDS_MAX).map(|by| Parking { by }));
        let mut bytes: Vec<u8> = states.iter().map(|state| state.to_byte()).collect();
        for (state, &byte) in states.iter().zip(&bytes) {
            assert_eq!(PageState::from_byte(byte), *state);
        }
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.len(), states.len(), "two states share a byte");
    }
}
