//! Geometries the conformance suite runs on: every LBA size, every metadata size, a
//! write granularity above the LBA size, non-power-of-two zone sizes and capacities,
//! with and without open/active limits.
#![allow(dead_code)]

use znswap_zoned::Geometry;

const K: u64 = 1 << 10;
const M: u64 = 1 << 20;

/// 4 KiB LBAs, 16 B metadata (ZNSwap's format), capacity 3/4 of the zone size.
pub fn lba4k_md16() -> Geometry {
    Geometry::from_bytes(4096, 16, 8, M, 768 * K, 3, 5, 4096).unwrap()
}

/// 512 B LBAs, 8 B metadata, 3 MiB zones with 2.5 MiB capacity, open = active limit.
pub fn lba512_md8() -> Geometry {
    Geometry::from_bytes(512, 8, 6, 3 * M, 5 * M / 2, 2, 2, 512).unwrap()
}

/// No metadata, 192 KiB write granularity (seed 002's device), no limits.
pub fn granularity_192k() -> Geometry {
    Geometry::from_bytes(4096, 0, 5, 2 * M, 1536 * K, 0, 0, 192 * 1024).unwrap()
}

/// 64 B metadata (the ZN540 format), capacity equal to size, 4 zones.
pub fn lba4k_md64() -> Geometry {
    Geometry::from_bytes(4096, 64, 4, 256 * K, 256 * K, 2, 3, 4096).unwrap()
}

/// Gives each geometry a module of conformance tests built by `$harness(geometry)`.
/// `not_applicable`: the checks the backend itself cannot take on any geometry (no
/// reopen: `persistence`); the geometries' own are listed here (the 192 KiB granularity
/// device has no open or active limit, no metadata, and room for too few large appends).
#[macro_export]
macro_rules! conformance_matrix {
    ($harness:expr) => {
        $crate::conformance_matrix!($harness; not_applicable: []);
    };
    ($harness:expr; not_applicable: [$($skip:ident),* $(,)?]) => {
        mod lba4k_md16 {
            use super::*;
            znswap_zoned::conformance_tests!($harness(common::lba4k_md16()); not_applicable: [$($skip),*]);
        }
        mod lba512_md8 {
            use super::*;
            znswap_zoned::conformance_tests!($harness(common::lba512_md8()); not_applicable: [$($skip),*]);
        }
        mod granularity_192k {
            use super::*;
            znswap_zoned::conformance_tests!($harness(common::granularity_192k()); not_applicable: [
                $($skip,)*
                active_limit,
                implicit_open_at_limit,
                metadata_round_trip,
                open_limit,
                vectored_append_lands_as_one,
            ]);
        }
        mod lba4k_md64 {
            use super::*;
            znswap_zoned::conformance_tests!($harness(common::lba4k_md64()); not_applicable: [$($skip),*]);
        }
    };
}
