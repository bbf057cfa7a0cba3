//! znswap's live pager (work in progress): application memory beyond a budget lives on a
//! zoned device and comes back on fault, through userfaultfd.
//!
//! - [`uffd`]: the userfaultfd system call and ioctls, defined over `libc` (no bindgen).

pub mod uffd;
