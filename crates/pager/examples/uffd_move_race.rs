//! Whether `UFFDIO_MOVE` of one page can move it and still fail, on this kernel.
//!
//! Linux 6.18's `move_pages()` (mm/userfaultfd.c, since the batched moves of present
//! pages) keeps the `-EAGAIN` of a pass whose page-table entry changed under it (a write
//! to a write-protected page, an accessed bit) after the next pass moved the page: the
//! loop then retries the same address without advancing, finds its destination full and
//! returns `EEXIST` with nothing counted as moved. A pager that trusts the error believes
//! the page still at its source, and its bytes are at the destination (the `--wp-async`
//! abort of issue 33: "the victim at ... is not mapped, and its shadow page ... is").
//!
//! The probe makes that race likely: a thread writes a page while another write-protects
//! it again and again (each write to a protected page with `WP_ASYNC` rewrites the entry),
//! and the main thread moves the page to an empty destination. Every failed move is
//! checked against `/proc/self/pagemap`: a move that failed with the page at the
//! destination and none at the source is one the kernel did.
//!
//! `cargo run --release -p znswap-pager --example uffd_move_race [-- --pages N] [--json]`
//! (N moves; root, or `vm.unprivileged_userfaultfd=1`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use znswap_pager::pagemap::page_at;
use znswap_pager::uffd::{features, register_mode, Event, Userfaultfd};

// Shared with the other probes, which use more of them.
#[allow(dead_code)]
#[path = "common/area.rs"]
mod area;
#[allow(dead_code)]
#[path = "common/report.rs"]
mod report;
use area::{Area, PAGE};

#[derive(Default, serde::Serialize)]
struct Tally {
    moves: u64,
    moved: u64,
    /// Failed with `EEXIST`, and the page is at the destination with none at the source.
    eexist_but_moved: u64,
    /// Failed with `EEXIST`, the page still at the source.
    eexist_not_moved: u64,
    /// Failed otherwise (`EFAULT`: a write-protect marker where the page was, and so on).
    other_errors: u64,
    /// Failed with something else than `EEXIST`, yet the page is at the destination.
    other_but_moved: u64,
    seconds: f64,
}

fn main() {
    let (moves, json) = report::args(200_000);
    let uffd = match Userfaultfd::new(features::PAGEFAULT_FLAG_WP | features::WP_ASYNC | features::MOVE, 0) {
        Ok(uffd) => Arc::new(uffd),
        Err(error) => {
            eprintln!("uffd_move_race: a userfaultfd with WP_ASYNC and MOVE: {error}");
            std::process::exit(2);
        }
    };
    let source = Area::new(1);
    let destination = Area::new(1);
    uffd.register(source.base, PAGE, register_mode::MISSING | register_mode::WP).expect("registering the source");
    uffd.register(destination.base, PAGE, register_mode::MISSING).expect("registering the destination");
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let (at, dst) = (source.at(0), destination.at(0));

    // Missing faults at the source (after a move) get a fresh page: the writer goes on.
    let handler = {
        let (uffd, stop) = (uffd.clone(), stop.clone());
        std::thread::spawn(move || {
            let page = vec![0x11u8; PAGE as usize];
            while !stop.load(Relaxed) {
                if !uffd.poll(10).expect("polling the userfaultfd") {
                    continue;
                }
                while let Some(event) = uffd.read_event().expect("reading the userfaultfd") {
                    if let Event::PageFault { address, .. } = event {
                        let address = address & !(PAGE - 1);
                        // A copy lands over a write-protect marker too; EEXIST: already there.
                        let _ = uffd.copy(address, &page, false, true);
                    }
                }
            }
        })
    };
    let writer = {
        let (stop, writes) = (stop.clone(), writes.clone());
        std::thread::spawn(move || {
            let mut value = 0u64;
            while !stop.load(Relaxed) {
                value += 1;
                // SAFETY: the source page, mapped for the probe's life (a fault on it is
                // served by the handler above).
                unsafe { (at as *mut u64).write_volatile(value) };
                writes.fetch_add(1, Relaxed);
            }
        })
    };
    let protector = {
        let (uffd, stop) = (uffd.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                // Each protection makes the writer's next write rewrite the entry.
                let _ = uffd.write_protect(at, PAGE, true, false);
            }
        })
    };

    let mut tally = Tally::default();
    let started = Instant::now();
    for _ in 0..moves {
        tally.moves += 1;
        let result = uffd.move_pages(dst, at, PAGE, false);
        let (at_source, at_destination) = (page_at(at), page_at(dst));
        match result {
            Ok(moved) if moved == PAGE => tally.moved += 1,
            Ok(_) => tally.other_errors += 1,
            Err(error) if error.errno() == Some(libc::EEXIST) => {
                if at_destination && !at_source {
                    tally.eexist_but_moved += 1;
                } else {
                    tally.eexist_not_moved += 1;
                }
            }
            Err(_) => {
                tally.other_errors += 1;
                tally.other_but_moved += at_destination as u64;
            }
        }
        // Empty the destination for the next move. (The writer may have refaulted the
        // source meanwhile: it holds a page again, or will.)
        // SAFETY: the destination page, ours.
        let rc = unsafe { libc::madvise(dst as *mut libc::c_void, PAGE as usize, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0, "MADV_DONTNEED: {}", std::io::Error::last_os_error());
        // Let the writer bring the source back before the next move.
        while !page_at(at) {
            std::hint::spin_loop();
            if started.elapsed().as_secs() > 600 {
                panic!("the source page never came back");
            }
        }
    }
    tally.seconds = started.elapsed().as_secs_f64();
    stop.store(true, Relaxed);
    for thread in [handler, writer, protector] {
        thread.join().expect("a probe thread");
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&tally).expect("JSON"));
    } else {
        println!(
            "UFFDIO_MOVE of one page against a writer and a write-protector, {} moves in {:.1} s ({} writes)",
            tally.moves,
            tally.seconds,
            writes.load(Relaxed)
        );
        println!("  moved                                      {:>9}", tally.moved);
        println!("  EEXIST, yet the page is at the destination {:>9}", tally.eexist_but_moved);
        println!("  EEXIST, the page still at the source       {:>9}", tally.eexist_not_moved);
        println!("  other errors                               {:>9}", tally.other_errors);
        println!("  other errors, yet moved                    {:>9}", tally.other_but_moved);
    }
}
