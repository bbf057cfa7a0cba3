//! The facts a pager that learns of writes without write-protect faults would rest on,
//! measured on this kernel (issue 33: "consider `UFFD_FEATURE_WP_ASYNC` with
//! `PAGEMAP_SCAN`"). Today reference sampling and the swap cache learn of a write by a
//! write-protect fault, a round trip through a handler thread that the kernel's swap
//! never makes (it reads the dirty bit). With asynchronous write protection the kernel
//! lifts the protection itself on a write, and `PAGEMAP_SCAN` on `/proc/self/pagemap`
//! reports which pages were written since they were protected (`PAGE_IS_WRITTEN`) and
//! protects them again in the same call (`PM_SCAN_WP_MATCHING`).
//!
//! - Its rules: which features combine with it on one userfaultfd (missing faults,
//!   `UFFDIO_MOVE`), and what scans as written (a page written, copied in protected or
//!   not, moved back from parking, discarded, never touched).
//! - Its costs: a write to a protected page resolved by the kernel, per page; a scan
//!   that protects again, per page scanned, with none, a tenth or all of them written;
//!   against `UFFDIO_WRITEPROTECT` of the same range.
//!
//! `cargo run --release -p znswap-pager --example uffd_wp_async [-- --pages N] [--json]`
//! prints a table (and JSON with `--json`). Root, or `vm.unprivileged_userfaultfd=1`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use znswap_pager::pagemap::WrittenScan;
use znswap_pager::uffd::{features, register_mode, Event, Userfaultfd};

#[path = "common/area.rs"]
mod area;
#[path = "common/report.rs"]
mod report;
use area::{Area, PAGE};
use report::{us_per, Figure, Rule};

/// The library's scanner (`znswap_pager::pagemap`), answering in page ranges.
struct Pagemap {
    scan: WrittenScan,
}

impl Pagemap {
    fn open() -> Pagemap {
        Pagemap { scan: WrittenScan::open().expect("PAGEMAP_SCAN on /proc/self/pagemap (Linux 6.7)") }
    }

    /// The pages of `start..end` written since they were protected (and, with
    /// `protect`, protected again), as page ranges counted from `start`.
    fn written(&mut self, start: u64, end: u64, protect: bool) -> Vec<(u64, u64)> {
        let mut found = Vec::new();
        self.scan
            .scan(start, end, protect, &mut |from, to| found.push(((from - start) / PAGE, (to - start) / PAGE)))
            .expect("PAGEMAP_SCAN");
        found
    }

    /// Whether page `page` of `area` scans as written (without protecting it).
    fn is_written(&mut self, area: &Area, page: u64) -> bool {
        !self.written(area.at(page), area.at(page) + PAGE, false).is_empty()
    }

    /// What pages `pages` of `area` scan as, in words.
    fn scans(&mut self, area: &Area, pages: &[u64]) -> String {
        let words: Vec<&str> = pages
            .iter()
            .map(|&page| if self.is_written(area, page) { "scans written" } else { "scans clean" })
            .collect();
        words.join(", ")
    }
}

/// Writes a byte to each of `pages` of `area` on another thread, which a fault with no
/// handler would block: `None` if the writes did not finish within a second.
fn write_elsewhere(area: &Area, pages: std::ops::Range<u64>) -> Option<Duration> {
    let base = area.base;
    let (tell, told) = mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        for page in pages {
            // SAFETY: a page of the caller's mapping, which outlives the wait below
            // unless the write blocks (then the process exits before unmapping it).
            unsafe { ((base + page * PAGE) as *mut u8).write_volatile(0x5a) };
        }
        let _ = tell.send(started.elapsed());
    });
    told.recv_timeout(Duration::from_secs(1)).ok()
}

fn yes_no(value: bool, yes: &str, no: &str) -> String {
    if value { yes } else { no }.to_string()
}

fn main() {
    let (pages, json) = report::args(65536);
    let mut rules = Vec::new();
    let mut figures = Vec::new();

    // Which features combine with asynchronous write protection on one descriptor.
    let combined = Userfaultfd::new(features::WP_ASYNC | features::PAGEFAULT_FLAG_WP | features::MOVE, 0);
    rules.push(Rule {
        name: "WP_ASYNC with UFFDIO_MOVE on one userfaultfd",
        outcome: match &combined {
            Ok(_) => "accepted".into(),
            Err(error) => error.to_string(),
        },
    });
    let uffd = combined
        .or_else(|_| Userfaultfd::new(features::WP_ASYNC | features::PAGEFAULT_FLAG_WP, 0))
        .expect("userfaultfd with WP_ASYNC (Linux 6.7)");
    let moves = uffd.features() & features::MOVE != 0;
    let mut pagemap = Pagemap::open();

    // Pages 0-3 written before registration; 4-7 never touched.
    let area = Area::new(8);
    (0..4).for_each(|page| area.touch_page(page));
    uffd.register(area.base, area.pages * PAGE, register_mode::MISSING | register_mode::WP).unwrap();
    rules.push(Rule { name: "a present page, registered, not yet protected", outcome: pagemap.scans(&area, &[0]) });
    rules.push(Rule { name: "a never-touched page (empty PTE)", outcome: pagemap.scans(&area, &[4]) });
    uffd.write_protect(area.base, area.pages * PAGE, true, false).unwrap();
    rules.push(Rule { name: "a present page after UFFDIO_WRITEPROTECT", outcome: pagemap.scans(&area, &[0]) });
    let wrote = write_elsewhere(&area, 1..2);
    rules.push(Rule {
        name: "a write to a protected page, no handler reading events",
        outcome: match wrote {
            Some(took) => format!(
                "completed in {:.1} µs, {}",
                took.as_secs_f64() * 1e6,
                yes_no(uffd.poll(0).unwrap(), "an event was queued", "no event queued")
            ),
            None => {
                println!("a write to a protected page blocked: asynchronous write protection does not work here");
                std::process::exit(1);
            }
        },
    });
    rules.push(Rule { name: "that page, then page 2 (not written)", outcome: pagemap.scans(&area, &[1, 2]) });
    let matched = pagemap.written(area.base, area.at(4), true);
    rules.push(Rule {
        name: "a scan with PM_SCAN_WP_MATCHING, then a second scan",
        outcome: format!("first found {matched:?}, second found {:?}", pagemap.written(area.base, area.at(4), false)),
    });
    let page = [0x33u8; PAGE as usize];
    uffd.copy(area.at(4), &page, true, false).unwrap();
    uffd.copy(area.at(5), &page, false, false).unwrap();
    rules.push(Rule { name: "UFFDIO_COPY with MODE_WP, and without", outcome: pagemap.scans(&area, &[4, 5]) });
    // SAFETY: a page of our own mapping.
    unsafe { libc::madvise(area.at(2) as *mut libc::c_void, PAGE as usize, libc::MADV_DONTNEED) };
    rules.push(Rule { name: "a protected clean page after MADV_DONTNEED", outcome: pagemap.scans(&area, &[2]) });
    if moves {
        let parking = Area::new(1);
        uffd.register(parking.base, PAGE, register_mode::MISSING).unwrap();
        uffd.move_pages(parking.base, area.at(3), PAGE, false).unwrap();
        uffd.move_pages(area.at(3), parking.base, PAGE, false).unwrap();
        rules.push(Rule {
            name: "a protected clean page moved out and back (UFFDIO_MOVE)",
            outcome: pagemap.scans(&area, &[3]),
        });
    }
    // A missing fault still comes to the handler as an event on the same descriptor.
    let reader = {
        let at = area.at(6);
        // SAFETY: a page of `area`, alive until the join below.
        std::thread::spawn(move || unsafe { (at as *const u8).read_volatile() })
    };
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut missing = None;
    while missing.is_none() && Instant::now() < deadline {
        if uffd.poll(10).unwrap() {
            while let Some(event) = uffd.read_event().unwrap() {
                if let Event::PageFault { address, write_protect, .. } = event {
                    missing = Some((address & !(PAGE - 1), write_protect));
                }
            }
        }
    }
    let delivered = missing.is_some_and(|(address, wp)| address == area.at(6) && !wp);
    uffd.copy(area.at(6), &page, false, true).unwrap();
    assert_eq!(reader.join().unwrap(), 0x33, "the reader saw the page the handler copied in");
    rules.push(Rule {
        name: "a missing fault on the same userfaultfd",
        outcome: yes_no(delivered, "delivered as an event (synchronous)", "not delivered"),
    });

    // Costs, over `pages` present pages.
    let big = Area::new(pages);
    big.touch();
    uffd.register(big.base, big.pages * PAGE, register_mode::MISSING | register_mode::WP).unwrap();
    let started = Instant::now();
    uffd.write_protect(big.base, big.pages * PAGE, true, false).unwrap();
    figures.push(Figure {
        name: "UFFDIO_WRITEPROTECT of the whole range".into(),
        us_per_page: us_per(started.elapsed(), pages),
        samples: pages,
        what: "one ioctl, every page present",
    });
    let took = write_elsewhere(&big, 0..pages).expect("writes to protected pages completed");
    figures.push(Figure {
        name: "a write to a protected page".into(),
        us_per_page: us_per(took, pages),
        samples: pages,
        what: "resolved by the kernel (no handler), one write per page in order",
    });
    for (label, every) in [("all", 1u64), ("a tenth", 10), ("none", 0)] {
        // Protect all, then write every `every`-th page, then time the scan that
        // finds them and protects them again.
        pagemap.written(big.base, big.base + pages * PAGE, true);
        if every > 0 {
            (0..pages).step_by(every as usize).for_each(|page| big.touch_page(page));
        }
        let started = Instant::now();
        let found = pagemap.written(big.base, big.base + pages * PAGE, true);
        let elapsed = started.elapsed();
        let written: u64 = found.iter().map(|(start, end)| end - start).sum();
        let expected = if every == 0 { 0 } else { pages.div_ceil(every) };
        assert_eq!(written, expected, "the scan found the pages written");
        figures.push(Figure {
            name: format!("scan + protect again, {label} written"),
            us_per_page: us_per(elapsed, pages),
            samples: pages,
            what: "PAGEMAP_SCAN with PM_SCAN_WP_MATCHING, per page scanned",
        });
    }

    report::print(&figures, "with WP_ASYNC", &rules, json);
}
