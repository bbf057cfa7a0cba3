//! The userfaultfd facts a pager that sees reads would rest on, measured on the running kernel
//! (issue 33 asks that they be verified before the design is chosen):
//!
//! - `UFFDIO_MOVE` takes a private page out of a region with no copy ("parking" it in an
//!   area registered with the same userfaultfd), and back on a missing fault; its cost
//!   per page, one page per ioctl and in contiguous batches; against `UFFDIO_COPY`,
//!   `MADV_DONTNEED` and `UFFDIO_WRITEPROTECT`.
//! - Its rules: the destination must be registered; a page shared with a fork's child,
//!   or a never-written (zero) page, is refused (which errno).
//! - The round trip of a fault served by a handler thread, missing and write-protect,
//!   as the faulting thread sees it.
//!
//! `cargo run --release -p znswap-pager --example uffd_facts [-- --pages N] [--json]`
//! prints a table (and JSON with `--json`). Root, or `vm.unprivileged_userfaultfd=1`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use znswap_pager::uffd::{features, register_mode, Event, UffdError, Userfaultfd};
use znswap_pager::PAGE_BYTES;

#[path = "common/area.rs"]
mod area;
#[path = "common/report.rs"]
mod report;
use area::{Area, PAGE};
use report::{us_per, Figure, Rule};

fn main() {
    let (pages, json) = report::args(16384);
    let uffd = Arc::new(
        Userfaultfd::new(features::MOVE | features::PAGEFAULT_FLAG_WP, 0).expect("userfaultfd with MOVE and WP"),
    );

    // Parking and unparking, one page per ioctl, every other page (scattered victims).
    let region = Area::new(pages);
    let parking = Area::new(pages);
    // Touched first: a registered page that is missing waits for a handler.
    region.touch();
    uffd.register(region.base, region.pages * PAGE, register_mode::MISSING | register_mode::WP).unwrap();
    uffd.register(parking.base, parking.pages * PAGE, register_mode::MISSING).unwrap();
    let scattered: Vec<u64> = (0..pages).step_by(2).collect();
    let mut figures = park_page_by_page(&uffd, &region, &parking, &scattered);
    figures.extend(park_in_batches(&uffd, &region, &parking, pages));
    figures.extend(alternatives(&uffd, &region, &scattered));

    let mut rules = registration_rules(&uffd);
    rules.push(zero_page_rule(&uffd));
    rules.extend(shared_page_rules(&uffd));

    figures.extend(round_trips(&uffd));
    report::print(&figures, "UFFDIO_MOVE of", &rules, json);
}

// ---- costs ----

/// Parks the `scattered` pages of `region`, one per ioctl, and unparks them.
fn park_page_by_page(uffd: &Userfaultfd, region: &Area, parking: &Area, scattered: &[u64]) -> Vec<Figure> {
    let started = Instant::now();
    for &page in scattered {
        let moved = uffd.move_pages(parking.at(page), region.at(page), PAGE, false).unwrap();
        assert_eq!(moved, PAGE);
    }
    let park = Figure {
        name: "park, 1 page per ioctl".into(),
        us_per_page: us_per(started.elapsed(), scattered.len() as u64),
        samples: scattered.len() as u64,
        what: "UFFDIO_MOVE region -> parking, every other page",
    };
    let started = Instant::now();
    for &page in scattered {
        uffd.move_pages(region.at(page), parking.at(page), PAGE, false).unwrap();
    }
    let unpark = Figure {
        name: "unpark, 1 page per ioctl".into(),
        us_per_page: us_per(started.elapsed(), scattered.len() as u64),
        samples: scattered.len() as u64,
        what: "UFFDIO_MOVE parking -> region",
    };
    vec![park, unpark]
}

/// Parks the whole region in contiguous batches, and unparks it.
fn park_in_batches(uffd: &Userfaultfd, region: &Area, parking: &Area, pages: u64) -> Vec<Figure> {
    let mut figures = Vec::new();
    for batch in [16u64, 64, 256] {
        let runs = pages / batch;
        let started = Instant::now();
        for run in 0..runs {
            let first = run * batch;
            let moved = uffd.move_pages(parking.at(first), region.at(first), batch * PAGE, false).unwrap();
            assert_eq!(moved, batch * PAGE);
        }
        let park = us_per(started.elapsed(), runs * batch);
        let started = Instant::now();
        for run in 0..runs {
            let first = run * batch;
            uffd.move_pages(region.at(first), parking.at(first), batch * PAGE, false).unwrap();
        }
        let unpark = us_per(started.elapsed(), runs * batch);
        figures.push(Figure {
            name: format!("park, {batch} contiguous pages per ioctl"),
            us_per_page: park,
            samples: runs * batch,
            what: "UFFDIO_MOVE region -> parking",
        });
        figures.push(Figure {
            name: format!("unpark, {batch} contiguous pages per ioctl"),
            us_per_page: unpark,
            samples: runs * batch,
            what: "UFFDIO_MOVE parking -> region",
        });
    }
    figures
}

/// The alternatives on the `scattered` pages: discard and copy back, write-protect.
/// Leaves the region unprotected.
fn alternatives(uffd: &Userfaultfd, region: &Area, scattered: &[u64]) -> Vec<Figure> {
    let mut figures = Vec::new();
    let started = Instant::now();
    for &page in scattered {
        // SAFETY: a page of our own mapping.
        unsafe { libc::madvise(region.at(page) as *mut libc::c_void, PAGE_BYTES, libc::MADV_DONTNEED) };
    }
    figures.push(Figure {
        name: "MADV_DONTNEED, 1 page per call".into(),
        us_per_page: us_per(started.elapsed(), scattered.len() as u64),
        samples: scattered.len() as u64,
        what: "today's discard of a written-out page (a TLB flush each)",
    });
    let bytes = vec![7u8; PAGE_BYTES];
    let started = Instant::now();
    for &page in scattered {
        assert!(uffd.copy(region.at(page), &bytes, false, false).unwrap());
    }
    figures.push(Figure {
        name: "UFFDIO_COPY, 1 page per ioctl".into(),
        us_per_page: us_per(started.elapsed(), scattered.len() as u64),
        samples: scattered.len() as u64,
        what: "today's install of a page read from the device",
    });
    let started = Instant::now();
    for &page in scattered {
        uffd.write_protect(region.at(page), PAGE, true, false).unwrap();
    }
    figures.push(Figure {
        name: "UFFDIO_WRITEPROTECT, 1 page per ioctl".into(),
        us_per_page: us_per(started.elapsed(), scattered.len() as u64),
        samples: scattered.len() as u64,
        what: "today's victim protection (reference sampling, Appendix A)",
    });
    uffd.write_protect(region.base, region.pages * PAGE, false, false).unwrap();
    figures
}

// ---- rules ----

fn outcome(result: Result<u64, UffdError>) -> String {
    match result {
        Ok(bytes) => format!("moved {bytes} B"),
        Err(error) => error.to_string(),
    }
}

/// Which ends must be registered, and what the source and destination must hold.
fn registration_rules(uffd: &Userfaultfd) -> Vec<Rule> {
    // Page 0 of each area is the source, page 1 (never touched) the destination (the
    // probe's pages 4 and 5, never touched: a move from nothing).
    let unregistered = Area::new(4);
    unregistered.touch_page(0);
    let probe = Area::new(6);
    probe.touch_page(0);
    uffd.register(probe.base, probe.pages * PAGE, register_mode::MISSING).unwrap();
    vec![
        Rule {
            name: "destination not registered",
            outcome: outcome(uffd.move_pages(unregistered.at(1), probe.at(0), PAGE, false)),
        },
        Rule {
            name: "source not registered, destination registered",
            outcome: outcome(uffd.move_pages(probe.at(1), unregistered.at(0), PAGE, false)),
        },
        Rule {
            name: "from an empty source (no source holes allowed)",
            outcome: outcome(uffd.move_pages(probe.at(4), probe.at(5), PAGE, false)),
        },
        Rule {
            name: "onto a mapped page",
            outcome: outcome({
                uffd.copy(probe.at(3), &[3; PAGE as usize], false, true).unwrap();
                uffd.move_pages(probe.at(0), probe.at(3), PAGE, false)
            }),
        },
    ]
}

/// A page only read since it was mapped (the shared zero page).
fn zero_page_rule(uffd: &Userfaultfd) -> Rule {
    let zero = Area::new(2);
    uffd.register(zero.base, zero.pages * PAGE, register_mode::MISSING).unwrap();
    uffd.zeropage(zero.at(0), PAGE, false).unwrap();
    Rule {
        name: "a zero page (read, never written)",
        outcome: outcome(uffd.move_pages(zero.at(1), zero.at(0), PAGE, false)),
    }
}

/// A page shared with a fork's child (copy-on-write, not exclusive), then once the child
/// is gone.
fn shared_page_rules(uffd: &Userfaultfd) -> Vec<Rule> {
    let mut rules = Vec::new();
    let shared = Area::new(2);
    shared.touch_page(0);
    uffd.register(shared.base, shared.pages * PAGE, register_mode::MISSING).unwrap();
    // SAFETY: the child only sleeps and exits (no allocation, no locks).
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: async-signal-safe calls in the child.
        unsafe {
            libc::sleep(2);
            libc::_exit(0);
        }
    }
    rules.push(Rule {
        name: "a page shared with a fork's child",
        outcome: outcome(uffd.move_pages(shared.at(1), shared.at(0), PAGE, false)),
    });
    // SAFETY: our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    rules.push(Rule {
        name: "the same page once the child is gone",
        outcome: outcome(uffd.move_pages(shared.at(1), shared.at(0), PAGE, false)),
    });
    // A write after the child is gone makes the page the parent's alone again.
    shared.touch_page(0);
    rules.push(Rule {
        name: "the same page written once the child is gone",
        outcome: outcome(uffd.move_pages(shared.at(1), shared.at(0), PAGE, false)),
    });
    rules
}

// ---- round trips ----

/// A handler thread serves faults of `trip` (moving pages back from parking, or lifting
/// write protection); the faulting thread times each access.
fn round_trips(uffd: &Arc<Userfaultfd>) -> Vec<Figure> {
    let trip = Arc::new(Area::new(4096));
    let trip_parking = Arc::new(Area::new(4096));
    trip.touch();
    uffd.register(trip.base, trip.pages * PAGE, register_mode::MISSING | register_mode::WP).unwrap();
    uffd.register(trip_parking.base, trip_parking.pages * PAGE, register_mode::MISSING).unwrap();
    uffd.move_pages(trip_parking.base, trip.base, trip.pages * PAGE, false).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let handler = {
        let (uffd, trip, trip_parking, stop, served) =
            (uffd.clone(), trip.clone(), trip_parking.clone(), stop.clone(), served.clone());
        std::thread::spawn(move || serve_round_trips(&uffd, &trip, &trip_parking, &stop, &served))
    };
    let mut missing_ns = Vec::with_capacity(trip.pages as usize);
    for page in 0..trip.pages {
        let started = Instant::now();
        // SAFETY: a page of our own registered mapping; the handler maps it.
        let byte = unsafe { (trip.at(page) as *const u8).read_volatile() };
        missing_ns.push(started.elapsed().as_nanos() as u64);
        assert_eq!(byte, page as u8 | 1, "the page came back with its bytes");
    }
    uffd.write_protect(trip.base, trip.pages * PAGE, true, false).unwrap();
    let mut wp_ns = Vec::with_capacity(trip.pages as usize);
    for page in 0..trip.pages {
        let started = Instant::now();
        // SAFETY: as above.
        unsafe { (trip.at(page) as *mut u8).write_volatile(1) };
        wp_ns.push(started.elapsed().as_nanos() as u64);
    }
    stop.store(true, Ordering::Release);
    handler.join().unwrap();
    vec![
        Figure {
            name: "missing fault round trip (unpark)".into(),
            us_per_page: median_us(&mut missing_ns),
            samples: trip.pages,
            what: "median, as the faulting thread sees it: event, handler's UFFDIO_MOVE, wake",
        },
        Figure {
            name: "write-protect fault round trip".into(),
            us_per_page: median_us(&mut wp_ns),
            samples: trip.pages,
            what: "median: event, handler's unprotect, wake",
        },
    ]
}

/// The handler thread of `round_trips`: until `stop`, moves missing pages of `trip` back
/// from `trip_parking` and lifts write protection.
fn serve_round_trips(uffd: &Userfaultfd, trip: &Area, trip_parking: &Area, stop: &AtomicBool, served: &AtomicU64) {
    while !stop.load(Ordering::Acquire) {
        if !uffd.poll(20).unwrap() {
            continue;
        }
        while let Some(event) = uffd.read_event().unwrap() {
            if let Event::PageFault { address, write_protect, .. } = event {
                let page = address & !(PAGE - 1);
                if write_protect {
                    uffd.write_protect(page, PAGE, false, true).unwrap();
                } else {
                    let offset = page - trip.base;
                    uffd.move_pages(page, trip_parking.base + offset, PAGE, true).unwrap();
                }
                served.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The median of nanosecond samples, in µs (sorts them).
fn median_us(samples: &mut [u64]) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2] as f64 / 1e3
}
