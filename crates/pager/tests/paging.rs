//! The pager under load: every page read back must hold the last data written, with the
//! resident set held to the budget, through eviction, swap-in, the swap cache, zero pages,
//! GC and writes racing write-outs.

mod common;

use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use znswap_pager::{FaultMode, Pager, PagerConfig, PagerStats, Region, PAGE_BYTES};
use znswap_pager_core::ZERO_FILL_AROUND_PAGES;
use znswap_zoned::{
    CreateOptions, DeviceCounters, FileDevice, Geometry, MemDevice, ZoneCounters, ZoneInfo, ZoneOp, ZonedDevice,
};

use common::{check, fill};

/// The page `page` of a region mapped at `base`.
///
/// # Safety
/// The page is in a live region, and no other thread touches it meanwhile.
unsafe fn page_at(base: usize, page: u64) -> &'static mut [u8] {
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts_mut((base + page as usize * PAGE_BYTES) as *mut u8, PAGE_BYTES) }
}

fn geometry(zones: u32, zone_mib: u64, metadata_bytes: u32) -> Geometry {
    Geometry::from_bytes(4096, metadata_bytes, zones, zone_mib << 20, zone_mib << 20, 8, 8, 4096).unwrap()
}

/// Writes every page, then `ops` random accesses (a third of them writes), verifying
/// every read against the oracle; returns the pager's stats.
fn exercise(
    device: Arc<dyn ZonedDevice>,
    region_pages: u64,
    budget_pages: u64,
    ops: u64,
    seed: u64,
) -> znswap_pager::PagerStats {
    exercise_in(FaultMode::HandlerThreads(2), device, region_pages, budget_pages, ops, seed)
}

fn config(fault_mode: FaultMode, budget_pages: u64) -> PagerConfig {
    PagerConfig { fault_mode, ..PagerConfig::new(budget_pages * PAGE_BYTES as u64) }
}

/// `config` parking 128 pages, with no read-ahead, and with asynchronous write protection
/// if `wp_async`.
fn asynchronous(mut config: PagerConfig, wp_async: bool) -> PagerConfig {
    config.core.park_pages = 128;
    config.core.wp_async = wp_async;
    config.core.readahead_pages = 0;
    config
}

fn exercise_in(
    fault_mode: FaultMode,
    device: Arc<dyn ZonedDevice>,
    region_pages: u64,
    budget_pages: u64,
    ops: u64,
    seed: u64,
) -> znswap_pager::PagerStats {
    let config = config(fault_mode, budget_pages);
    let slack = config.core.slack_pages;
    let pager = Pager::new(device, config).unwrap();
    let mut region: Region = pager.alloc(region_pages * PAGE_BYTES as u64, 0).unwrap();
    common::exercise_memory(region.as_mut_slice(), ops, seed);
    let stats = pager.stats();
    drop(region);
    assert!(
        stats.core.resident_pages_max <= budget_pages + slack + 64,
        "resident max {} over budget {budget_pages} + slack",
        stats.core.resident_pages_max
    );
    assert_eq!(stats.core.lost_pages, 0);
    assert_eq!(stats.core.device_errors, 0);
    stats
}

#[test]
fn a_working_set_four_times_the_budget_reads_back_exactly() {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
    let stats = exercise(device, 4096, 1024, 40_000, 1);
    assert!(stats.core.swap_outs_written > 3000, "{stats:?}");
    assert!(stats.core.swap_in_reads > 1000, "{stats:?}");
    assert!(stats.core.swap_outs_zero > 0, "zero pages are not written: {stats:?}");
}

#[test]
fn the_swap_cache_saves_rewriting_clean_pages() {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
    let stats = exercise(device, 4096, 1024, 40_000, 2);
    assert!(stats.engine.swap_cache_hits > 0, "clean swapped-in pages are dropped without I/O: {stats:?}");
    assert!(stats.core.write_protect_faults > 0, "writes to swap-cached pages are caught: {stats:?}");
}

/// Swapped pages read back in random order, each written after it is read (`write`) or
/// only read; returns the counts of the reading part.
fn read_back(write: bool) -> PagerStats {
    read_back_with(config(FaultMode::HandlerThreads(1), 512), write, 20_000, 21)
}

/// `ops` reads of random pages swapped out under `config` (without read-ahead), each
/// followed by a write if `write`, and a check of every page; the counts of that part.
fn read_back_with(config: PagerConfig, write: bool, ops: u64, seed: u64) -> PagerStats {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
    let pager = Pager::new(device, {
        let mut config = config;
        config.core.readahead_pages = 0;
        config
    })
    .unwrap();
    let pages = 4096u64;
    let mut region = pager.alloc(pages * PAGE_BYTES as u64, 0).unwrap();
    let memory = region.as_mut_slice();
    let mut versions = vec![1u64; pages as usize];
    for page in 0..pages {
        fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
    }
    let before = pager.stats();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    for _ in 0..ops {
        let page = rng.next_u64() % pages;
        let bytes = &mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES];
        check(bytes, page, versions[page as usize]);
        if write {
            versions[page as usize] += 1;
            fill(bytes, page, versions[page as usize]);
        }
    }
    for page in 0..pages {
        check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, versions[page as usize]);
    }
    assert_eq!(pager.stats().core.lost_pages, 0);
    pager.stats().since(&before)
}

/// Random reads of swapped pages by one thread with handler polling bounded at
/// `fault_poll_us`; the counts of the reading part.
fn poll_run(fault_poll_us: u32) -> PagerStats {
    read_back_with(PagerConfig { fault_poll_us, ..config(FaultMode::HandlerThreads(1), 512) }, false, 5_000, 5)
}

/// A handler that resolved a fault polls for the next one: a thread faulting page after
/// page finds the handler polling for most of its faults (no wake-up of one), and never
/// with polling off. One handler thread: with two, the sleeping one is woken for each
/// fault too and, in a debug build beside other tests, took half of them first.
#[test]
fn a_handler_polls_for_the_next_fault() {
    let polled = poll_run(5_000);
    let faults = polled.core.missing_faults + polled.core.write_protect_faults;
    assert!(faults > 3_000, "{polled:?}");
    assert!(polled.faults_polled > faults / 2, "most faults found the handler polling: {polled:?}");
    assert!(polled.poll_spun_ns > 0, "the polls' time between faults is counted: {polled:?}");
    assert_eq!(polled.poll_paused_ticks, 0, "nothing ticked the gate: it stays open");
    let off = poll_run(0);
    assert!(off.core.missing_faults > 3_000, "{off:?}");
    assert_eq!((off.faults_polled, off.poll_spun_ns), (0, 0), "no polling when it is off: {off:?}");
}

/// A page read back keeps its slot (mapped write-protected) only while that pays: when
/// nearly every such page is written next, each write costs a write-protect fault to
/// save nothing, so pages read back are mapped writable with their slot dropped (all
/// but the probes that keep measuring); when they stay clean, they keep it.
#[test]
fn the_swap_cache_is_kept_only_while_cached_pages_stay_clean() {
    let rewritten = read_back(true);
    assert!(rewritten.core.swap_in_reads > 10_000, "{rewritten:?}");
    assert!(
        rewritten.core.swap_cache_skipped > rewritten.core.swap_in_reads / 2,
        "slots dropped at swap-in: {rewritten:?}"
    );
    assert!(
        rewritten.core.swap_cache_dirtied < rewritten.core.swap_in_reads / 4,
        "few write-protect faults on pages read back: {rewritten:?}"
    );
    let read_only = read_back(false);
    assert!(read_only.core.swap_in_reads > 10_000, "{read_only:?}");
    assert_eq!(read_only.core.swap_cache_skipped, 0, "clean pages keep their slots: {read_only:?}");
    assert!(
        read_only.engine.swap_cache_hits > read_only.core.swap_in_reads / 2,
        "and are evicted with no write: {read_only:?}"
    );
}

#[test]
fn gc_runs_beside_faults_at_high_utilization() {
    // 4096 pages of working set on 24 MiB of zones (6144 slots): about 65 % full, so
    // rewrites force the GC to move live pages while faults go on.
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(24, 1, 16)).unwrap());
    let stats = exercise(device, 4096, 512, 60_000, 3);
    assert!(stats.engine.gc_runs > 0 && stats.engine.gc_pages_written > 0, "the GC must have moved pages: {stats:?}");
}

#[test]
fn chunk_footers_on_a_device_without_metadata() {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(32, 1, 0)).unwrap());
    let stats = exercise(device, 3000, 600, 30_000, 4);
    assert!(stats.core.swap_in_reads > 0);
}

#[test]
fn the_file_device_pages_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let file = FileDevice::create(dir.path().join("d.zns"), geometry(48, 1, 16), CreateOptions::default()).unwrap();
    let stats = exercise(Arc::new(file), 4096, 1024, 20_000, 5);
    assert!(stats.core.swap_in_reads > 0);
}

#[test]
fn writes_racing_write_outs_are_never_lost() {
    racing_writes(FaultMode::HandlerThreads(2));
}

#[test]
fn writes_racing_write_outs_are_never_lost_when_self_paging() {
    racing_writes(FaultMode::SelfPaging);
}

/// Two threads hammer a small hot set while the budget forces its pages out over and
/// over: writes land during appends (aborting them) or after drops (faulting back in).
fn racing_writes(fault_mode: FaultMode) {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
    let pager = Pager::new(device, config(fault_mode, 256)).unwrap();
    let region = pager.alloc(2048 * PAGE_BYTES as u64, 0).unwrap();
    let base = region.as_ptr() as usize;
    std::thread::scope(|scope| {
        for thread in 0..2u64 {
            scope.spawn(move || {
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(thread + 11);
                // Each thread owns every other page, so writes never race each other.
                let mut versions = vec![0u64; 1024];
                for _ in 0..30_000 {
                    let index = rng.next_u64() % 1024;
                    let page = index * 2 + thread;
                    // SAFETY: this thread alone touches its pages of the region.
                    let bytes = unsafe { page_at(base, page) };
                    check(bytes, page, versions[index as usize]);
                    versions[index as usize] += 1;
                    fill(bytes, page, versions[index as usize]);
                }
                for index in 0..1024 {
                    let page = index * 2 + thread;
                    // SAFETY: as above.
                    let bytes = unsafe { page_at(base, page) };
                    check(bytes, page, versions[index as usize]);
                }
            });
        }
    });
    let stats = pager.stats();
    assert_eq!(stats.core.lost_pages, 0);
    assert!(stats.core.swap_in_reads > 0 && stats.core.swap_outs_written > 0, "{stats:?}");
}

#[test]
fn a_small_device_with_many_open_zones_is_used_with_fewer() {
    // 16 zones with 14 open (the QEMU ZNS namespace of the rig): the engine keeps fewer
    // open so the GC's watermarks fit.
    let geometry = Geometry::from_bytes(4096, 16, 16, 2 << 20, 2 << 20, 14, 14, 4096).unwrap();
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry).unwrap());
    let stats = exercise(device, 2048, 512, 10_000, 6);
    assert!(stats.core.swap_in_reads > 0);
}

#[test]
fn self_paging_pages_a_working_set_four_times_the_budget() {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
    let stats = exercise_in(FaultMode::SelfPaging, device, 4096, 1024, 40_000, 7);
    assert!(stats.core.swap_outs_written > 3000 && stats.core.swap_in_reads > 1000, "{stats:?}");
    assert!(
        stats.engine.swap_cache_hits > 0 && stats.core.write_protect_faults > 0,
        "swap cache and upgrades: {stats:?}"
    );
}

#[test]
fn self_paging_with_gc_and_chunk_footers_on_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = FileDevice::create(dir.path().join("d.zns"), geometry(24, 1, 0), CreateOptions::default()).unwrap();
    let stats = exercise_in(FaultMode::SelfPaging, Arc::new(file), 4096, 512, 60_000, 8);
    assert!(stats.engine.gc_runs > 0 && stats.engine.gc_pages_written > 0, "the GC must have moved pages: {stats:?}");
}

/// A SIGBUS that is not a userfault of ours (a mapping past the end of its file) must
/// still kill the process, self-paging pager or not: run in a child process.
#[test]
fn a_sigbus_that_is_not_ours_still_kills() {
    if std::env::var_os("ZNSWAP_SIGBUS_CHILD").is_some() {
        let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
        let pager = Pager::new(device, config(FaultMode::SelfPaging, 256)).unwrap();
        let file = tempfile::tempfile().unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a shared mapping of an empty file: touching it raises SIGBUS.
        let map = unsafe {
            libc::mmap(std::ptr::null_mut(), PAGE_BYTES, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0)
        };
        assert_ne!(map, libc::MAP_FAILED);
        // SAFETY: the access is the point of the test.
        let value = unsafe { std::ptr::read_volatile(map as *const u8) };
        drop(pager);
        panic!("read {value} past the end of a file without SIGBUS");
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_sigbus_that_is_not_ours_still_kills", "--nocapture", "--test-threads=1"])
        .env("ZNSWAP_SIGBUS_CHILD", "1")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGBUS),
        "the child must die of SIGBUS: {:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Two tenants, each with its own region and thread, under the tenant policy (a
/// swap-zone per tenant) and the hot/cold policy, with the GC running: every page reads
/// back as its tenant last wrote it.
#[test]
fn tenants_with_their_own_regions_page_independently() {
    for policy in [znswap_core::PolicyKind::Tenant, znswap_core::PolicyKind::HotCold] {
        let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(24, 1, 16)).unwrap());
        let mut pager_config = PagerConfig::for_bench(512 * PAGE_BYTES as u64);
        pager_config.core.policy = policy;
        pager_config.core.tenants = 2;
        let pager = Pager::new(device, pager_config).unwrap();
        let regions: Vec<Region> =
            (0..2).map(|tenant| pager.alloc(2048 * PAGE_BYTES as u64, tenant).unwrap()).collect();
        std::thread::scope(|scope| {
            for (tenant, region) in regions.iter().enumerate() {
                let base = region.as_ptr() as usize;
                scope.spawn(move || {
                    let mut rng = Xoshiro256PlusPlus::seed_from_u64(tenant as u64 + 21);
                    let mut versions = vec![0u64; 2048];
                    for _ in 0..25_000 {
                        let page = rng.next_u64() % 2048;
                        // SAFETY: this thread alone touches its tenant's region.
                        let bytes = unsafe { page_at(base, page) };
                        check(bytes, page, versions[page as usize]);
                        versions[page as usize] += 1;
                        fill(bytes, page, versions[page as usize]);
                    }
                    for page in 0..2048u64 {
                        // SAFETY: as above.
                        let bytes = unsafe { page_at(base, page) };
                        check(bytes, page, versions[page as usize]);
                    }
                });
            }
        });
        let stats = pager.stats();
        assert_eq!(stats.core.lost_pages, 0);
        assert!(stats.core.swap_in_reads > 1000 && stats.engine.gc_runs > 0, "{policy:?}: {stats:?}");
        drop(regions);
    }
}

/// Fills 4096 pages of a new region of `pager` and sweeps them in order once they are
/// swapped out, every page checked; returns (faults, pages read) of the sweep.
fn readahead_sweep(pager: &Pager) -> (u64, u64) {
    let stats = sweep_in_order(pager, &(0..4096u64).collect::<Vec<_>>());
    (stats.core.missing_faults, stats.core.swap_in_reads)
}

/// Fills `order.len()` pages of a new region of `pager` and, once they are swapped out,
/// reads them back in `order`, every page checked; the sweep's stats.
fn sweep_in_order(pager: &Pager, order: &[u64]) -> PagerStats {
    let mut region = pager.alloc(order.len() as u64 * PAGE_BYTES as u64, 0).unwrap();
    let memory = region.as_mut_slice();
    for page in 0..order.len() as u64 {
        fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
    }
    let before = pager.stats();
    for &page in order {
        check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
    }
    let stats = pager.stats().since(&before);
    assert_eq!(pager.stats().core.lost_pages, 0);
    stats
}

fn readahead_pager(fault_mode: FaultMode) -> Pager {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
    Pager::new(device, {
        let mut config = config(fault_mode, 512);
        config.core.readahead_pages = 8;
        config
    })
    .unwrap()
}

/// A sequential sweep over swapped-out pages with a readahead window: every page reads
/// back exactly, and most pages arrive by readahead instead of by their own fault.
#[test]
fn readahead_serves_a_sequential_sweep_in_fewer_faults() {
    for fault_mode in [FaultMode::SelfPaging, FaultMode::HandlerThreads(1)] {
        let (faults, reads) = readahead_sweep(&readahead_pager(fault_mode));
        assert!(reads > 3000, "{fault_mode:?}: the sweep swaps most pages in: {reads}");
        assert!(faults * 3 < reads, "{fault_mode:?}: {faults} faults for {reads} pages read");
    }
}

/// Read-ahead follows a run of faults going down as well as up (Python frees a list
/// from its end; a stack grows down).
#[test]
fn readahead_serves_a_descending_sweep_in_fewer_faults() {
    for fault_mode in [FaultMode::SelfPaging, FaultMode::HandlerThreads(1)] {
        let stats = sweep_in_order(&readahead_pager(fault_mode), &(0..4096u64).rev().collect::<Vec<_>>());
        let (faults, reads) = (stats.core.missing_faults, stats.core.swap_in_reads);
        assert!(reads > 3000, "{fault_mode:?}: the sweep swaps most pages in: {reads}");
        assert!(faults * 3 < reads, "{fault_mode:?}: {faults} faults for {reads} pages read");
    }
}

/// Without hits the window stays at one page: random access reads next to nothing
/// ahead (FlashVM's warning about prefetching random pages on flash).
#[test]
fn readahead_reads_little_ahead_under_random_access() {
    let mut order: Vec<u64> = (0..4096u64).collect();
    // A fixed permutation (multiplication by an odd number modulo a power of two).
    for (index, page) in order.iter_mut().enumerate() {
        *page = (index as u64 * 2_654_435_761) % 4096;
    }
    let stats = sweep_in_order(&readahead_pager(FaultMode::SelfPaging), &order);
    assert!(stats.core.swap_in_reads > 3000, "the sweep swaps most pages in: {stats:?}");
    assert!(
        stats.core.readahead_pages_read * 20 < stats.core.swap_in_reads,
        "{} of {} pages read were read ahead under random access",
        stats.core.readahead_pages_read,
        stats.core.swap_in_reads
    );
}

/// A SIGBUS asks every self-paging pager of the process in turn, on the faulting
/// thread's one task: a pager without read-ahead asked first must not leave the next
/// one without it (seen once in CI, with the tests' pagers side by side).
#[test]
fn readahead_works_when_another_pager_without_it_is_asked_first() {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
    let plain = Pager::new(device, {
        let mut config = config(FaultMode::SelfPaging, 512);
        config.core.readahead_pages = 0;
        config
    })
    .unwrap();
    let mut plain_region = plain.alloc(64 * PAGE_BYTES as u64, 0).unwrap();
    plain_region.as_mut_slice()[0] = 1;
    let (faults, reads) = readahead_sweep(&readahead_pager(FaultMode::SelfPaging));
    assert!(reads > 3000 && faults * 3 < reads, "{faults} faults for {reads} pages read");
    drop(plain_region);
}

/// Every access stream `znswap bench` offers, on the in-memory and the file device in
/// both fault modes, with a working set four times the budget: every read is checked
/// against the last write, every page at the end, and the resident set stays within the
/// budget plus the stated slack.
#[test]
fn every_bench_workload_reads_back_exactly_on_both_devices() {
    use znswap_workload::{Generator, Workload};
    let (region_pages, budget_pages) = (4096u64, 1024u64);
    let dir = tempfile::tempdir().unwrap();
    for (index, name) in Workload::NAMES.iter().enumerate() {
        let workload = Workload::from_name(name).unwrap();
        for file_device in [false, true] {
            let device: Arc<dyn ZonedDevice> = if file_device {
                let path = dir.path().join(format!("{name}.zns"));
                Arc::new(FileDevice::create(path, geometry(48, 1, 16), CreateOptions::default()).unwrap())
            } else {
                Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap())
            };
            let fault_mode = if index % 2 == 0 { FaultMode::SelfPaging } else { FaultMode::HandlerThreads(1) };
            let config = config(fault_mode, budget_pages);
            let slack = config.core.slack_pages;
            let pager = Pager::new(device, config).unwrap();
            let mut region = pager.alloc(region_pages * PAGE_BYTES as u64, 0).unwrap();
            let memory = region.as_mut_slice();
            let mut versions = vec![0u64; region_pages as usize];
            for access in Generator::new(workload, region_pages, index as u64 + 1).take(6 * region_pages as usize) {
                let bytes = &mut memory[access.page as usize * PAGE_BYTES..][..PAGE_BYTES];
                let version = &mut versions[access.page as usize];
                if access.write {
                    *version += 1;
                    fill(bytes, access.page, *version);
                } else {
                    check(bytes, access.page, *version);
                }
            }
            for page in 0..region_pages {
                check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, versions[page as usize]);
            }
            let stats = pager.stats();
            let case = format!("{name} on the {} device", if file_device { "file" } else { "in-memory" });
            assert!(
                stats.core.swap_outs_written > region_pages / 2,
                "{case}: pages must have been swapped out: {stats:?}"
            );
            assert!(stats.core.swap_in_reads > 0, "{case}: pages must have been swapped in: {stats:?}");
            // Past the budget and its slack only by faults the core let through, counted,
            // when no room came in time (a loaded machine: 20 tests on 2 CPUs), each
            // mapping at most its page and the zero-filled pages after it.
            let allowed = budget_pages + slack + stats.core.budget_overruns * (1 + ZERO_FILL_AROUND_PAGES);
            assert!(
                stats.core.resident_pages_max <= allowed,
                "{case}: resident max {} over budget {budget_pages} + slack {slack} ({} faults let through)",
                stats.core.resident_pages_max,
                stats.core.budget_overruns
            );
            assert_eq!((stats.core.lost_pages, stats.core.device_errors), (0, 0), "{case}");
            drop(region);
        }
    }
}

/// First touches in address order map the never-written pages ahead too (no I/O), so a
/// sweep takes far fewer faults than pages; the pages read back as written.
#[test]
fn a_sequential_first_touch_sweep_takes_few_faults() {
    for fault_mode in [FaultMode::SelfPaging, FaultMode::HandlerThreads(1)] {
        let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
        let pager = Pager::new(device, config(fault_mode, 1024)).unwrap();
        let mut region = pager.alloc(4096 * PAGE_BYTES as u64, 0).unwrap();
        let memory = region.as_mut_slice();
        for page in 0..4096u64 {
            fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
        }
        let stats = pager.stats();
        assert!(
            stats.core.missing_faults * 8 < 4096,
            "{fault_mode:?}: {} faults for 4096 first touches",
            stats.core.missing_faults
        );
        for page in 0..4096u64 {
            check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
        }
        assert_eq!(pager.stats().core.lost_pages, 0);
        drop(region);
    }
}

#[test]
fn regions_freed_mid_write_out_and_allocated_again_lose_nothing() {
    // Each round frees a region whose pages are still being written out and allocates
    // the next, which takes the freed owner id once the engine lets it go: completions
    // of the old swap-outs must touch neither the new region's pages nor the long-lived
    // one's. (Allocating after a free once failed: the engine kept the id registered.)
    for fault_mode in [FaultMode::SelfPaging, FaultMode::HandlerThreads(1)] {
        let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
        let pager = Pager::new(device, config(fault_mode, 512)).unwrap();
        let mut kept = pager.alloc(1024 * PAGE_BYTES as u64, 0).unwrap();
        for page in 0..1024u64 {
            fill(&mut kept.as_mut_slice()[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
        }
        for round in 0..16u64 {
            let mut region = pager.alloc(1024 * PAGE_BYTES as u64, 0).unwrap();
            let memory = region.as_mut_slice();
            for page in 0..1024u64 {
                fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, round + 2);
            }
            for page in (0..1024u64).step_by(7) {
                check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, round + 2);
            }
            drop(region);
        }
        for page in 0..1024u64 {
            check(&kept.as_slice()[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
        }
        let stats = pager.stats();
        assert!(
            stats.core.swap_outs_written > 16 * 512,
            "{fault_mode:?}: only {} pages swapped out",
            stats.core.swap_outs_written
        );
        assert_eq!(stats.core.lost_pages, 0);
        assert_eq!(stats.core.device_errors, 0);
        drop(kept);
    }
}

#[test]
fn regions_beyond_regions_max_fail_clearly_and_freed_ids_are_reused() {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
    let pager = Pager::new(device, {
        let mut config = config(FaultMode::SelfPaging, 512);
        config.core.regions_max = 2;
        config
    })
    .unwrap();
    let mut first = pager.alloc(4 * PAGE_BYTES as u64, 0).unwrap();
    let _second = pager.alloc(4 * PAGE_BYTES as u64, 0).unwrap();
    let error = pager.alloc(4 * PAGE_BYTES as u64, 0).err().expect("a third region alive over regions_max 2");
    assert!(
        matches!(error, znswap_pager::PagerError::Core(znswap_pager::CoreError::TooManyRegions { max: 2 })),
        "{error}"
    );
    assert!(error.to_string().contains("regions_max"), "{error}");
    for round in 0..8u64 {
        fill(&mut first.as_mut_slice()[..PAGE_BYTES], 0, round + 1);
        drop(first);
        first = pager.alloc(4 * PAGE_BYTES as u64, 0).expect("the freed region's id, reused");
        check(&first.as_slice()[..PAGE_BYTES], 0, 0);
    }
}

/// Pages rewritten often stay resident under reference sampling, where a CLOCK with
/// reference bits from faults alone (and no refault passes) evicts them as often as the cold pages streaming
/// past: a hot set a quarter of the budget, written twice for each pass over half a
/// budget of cold pages, has a reuse distance well within the budget.
#[test]
fn reference_sampling_keeps_rewritten_pages_resident() {
    let (region_pages, budget_pages, hot_pages) = (4096u64, 1024u64, 256u64);
    for fault_mode in [FaultMode::SelfPaging, FaultMode::HandlerThreads(1)] {
        // Neither, reference sampling alone, the refault passes alone.
        let mut hot_misses = [0u64; 3];
        let configs = [(false, false), (true, false), (false, true)];
        for ((sampling, passes), misses) in configs.into_iter().zip(hot_misses.iter_mut()) {
            let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
            // No read-ahead: it would serve cold pages without faults, and the count is of
            // the hot pages' misses.
            let pager_config = {
                let mut config = config(fault_mode, budget_pages);
                config.core.reference_sampling = sampling;
                config.core.refault_passes = passes;
                config.core.readahead_pages = 0;
                config
            };
            let pager = Pager::new(device, pager_config).unwrap();
            let mut region = pager.alloc(region_pages * PAGE_BYTES as u64, 0).unwrap();
            let memory = region.as_mut_slice();
            let mut versions = vec![1u64; region_pages as usize];
            for page in 0..region_pages {
                fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
            }
            let (mut cold, mut hot, mut cold_writes) = (hot_pages, 0, 0u64);
            let mut before = pager.stats();
            // The first 4 budgets' worth of steps bring the hot set in; then the count starts.
            for step in 0..28 * budget_pages {
                if step == 4 * budget_pages {
                    before = pager.stats();
                    cold_writes = 0;
                }
                let page = if step % 2 == 0 {
                    cold = if cold + 1 == region_pages { hot_pages } else { cold + 1 };
                    cold_writes += 1;
                    cold
                } else {
                    hot = (hot + 1) % hot_pages;
                    hot
                };
                versions[page as usize] += 1;
                fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, versions[page as usize]);
            }
            let stats = pager.stats().since(&before);
            // Cold pages come back after 3840 others, far beyond the budget: each write
            // of one is a miss, and the rest are the hot pages'.
            *misses = stats.core.missing_faults.saturating_sub(cold_writes);
            for page in 0..region_pages {
                check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, versions[page as usize]);
            }
            assert_eq!(pager.stats().core.lost_pages, 0);
            if sampling {
                assert!(stats.core.write_protect_faults > 0, "{fault_mode:?}: sampling took no write-protect fault");
            }
            drop(region);
        }
        let [without, with, passes] = hot_misses;
        let hot_writes = 12 * budget_pages;
        assert!(
            with * 4 < without && with * 20 < hot_writes,
            "{fault_mode:?}: hot pages missed {with} times of {hot_writes} writes with reference sampling, \
             {without} without"
        );
        // The hot pages come back within the budget's refault distance: their passes
        // keep them, with no fault to see their writes.
        assert!(
            passes * 2 < without,
            "{fault_mode:?}: hot pages missed {passes} times of {hot_writes} writes with refault passes, \
             {without} without"
        );
    }
}

/// A device whose appends (and writes) take `APPEND_US_PER_PAGE` a page: swap-out slower
/// than the faults that need room, whichever CPUs the threads land on.
struct SlowAppends(MemDevice);

const APPEND_US_PER_PAGE: u64 = 40;

impl SlowAppends {
    /// (The device's slowness itself, not a wait for anything.)
    fn wait(pages: usize) {
        std::thread::sleep(Duration::from_micros(APPEND_US_PER_PAGE * pages as u64));
    }
}

impl ZonedDevice for SlowAppends {
    fn geometry(&self) -> &Geometry {
        self.0.geometry()
    }
    fn report_zone(&self, zone: u32) -> znswap_zoned::Result<ZoneInfo> {
        self.0.report_zone(zone)
    }
    fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>) -> znswap_zoned::Result<()> {
        self.0.read(lba, data, metadata)
    }
    fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>) -> znswap_zoned::Result<()> {
        Self::wait(data.len() / PAGE_BYTES);
        self.0.write(lba, data, metadata)
    }
    fn append(&self, zone: u32, data: &[u8], metadata: Option<&[u8]>) -> znswap_zoned::Result<u64> {
        Self::wait(data.len() / PAGE_BYTES);
        self.0.append(zone, data, metadata)
    }
    fn append_vectored(&self, zone: u32, data: &[IoSlice<'_>], metadata: Option<&[u8]>) -> znswap_zoned::Result<u64> {
        Self::wait(data.iter().map(|piece| piece.len()).sum::<usize>() / PAGE_BYTES);
        self.0.append_vectored(zone, data, metadata)
    }
    fn zone_op(&self, zone: u32, op: ZoneOp) -> znswap_zoned::Result<()> {
        self.0.zone_op(zone, op)
    }
    fn sync(&self) -> znswap_zoned::Result<()> {
        self.0.sync()
    }
    fn counters(&self) -> DeviceCounters {
        self.0.counters()
    }
    fn zone_counters(&self, zone: u32) -> znswap_zoned::Result<ZoneCounters> {
        self.0.zone_counters(zone)
    }
    fn describe(&self) -> String {
        format!("{} with appends of {APPEND_US_PER_PAGE} µs a page", self.0.describe())
    }
}

#[test]
fn faults_waiting_for_room_discard_written_pages_themselves() {
    // A sequential writer outruns the evictor (the device's appends are slow): its
    // faults wait at the budget's edge while written-out pages await their discard, and
    // do the discards themselves. Who gets a batch first is a race, so sweep until a
    // fault has (most runs see hundreds of pages discarded by faults in two sweeps).
    // With a fast device the evictor could keep ahead of the faults altogether in a run
    // whose threads landed on the right CPUs (about 1 run in 10 had no fault wait).
    for fault_mode in [FaultMode::SelfPaging, FaultMode::HandlerThreads(1)] {
        let device: Arc<dyn ZonedDevice> = Arc::new(SlowAppends(MemDevice::new(geometry(64, 1, 16)).unwrap()));
        let config = {
            let mut config = config(fault_mode, 512);
            config.core.slack_pages = 64;
            config
        };
        let pager = Pager::new(device, config).unwrap();
        let pages = 8192u64;
        let mut region = pager.alloc(pages * PAGE_BYTES as u64, 0).unwrap();
        let memory = region.as_mut_slice();
        let mut version = 0;
        while version < 2 || pager.stats().fault_discarded_pages == 0 && version < 12 {
            version += 1;
            for page in 0..pages {
                fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, version);
            }
        }
        for page in 0..pages {
            check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, version);
        }
        let stats = pager.stats();
        assert!(
            stats.fault_discarded_pages > 0,
            "{fault_mode:?}: no fault discarded a page in {version} sweeps: {stats:?}"
        );
        assert!(
            stats.core.resident_pages_max <= 512 + 64 + 64,
            "{fault_mode:?}: resident max {}",
            stats.core.resident_pages_max
        );
        assert_eq!((stats.core.lost_pages, stats.core.device_errors), (0, 0));
        drop(region);
    }
}

/// A working set larger than the budget plus the whole device: once swap is full the
/// budget gives (faults go past it, counted) instead of every fault waiting forever,
/// and every page still reads back exactly.
#[test]
fn a_working_set_beyond_budget_and_device_goes_past_the_budget_without_hanging() {
    for fault_mode in [FaultMode::SelfPaging, FaultMode::HandlerThreads(1)] {
        // 12 zones of 1 MiB: 3072 slots, part of them the GC's reserve and watermarks.
        let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(12, 1, 16)).unwrap());
        let pager = Pager::new(device, config(fault_mode, 512)).unwrap();
        let pages = 4096u64;
        let mut region = pager.alloc(pages * PAGE_BYTES as u64, 0).unwrap();
        let memory = region.as_mut_slice();
        for version in 1..=2u64 {
            for page in 0..pages {
                fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, version);
            }
        }
        for page in 0..pages {
            check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 2);
        }
        let stats = pager.stats();
        assert!(stats.core.budget_overruns > 0, "{fault_mode:?}: the budget never gave: {stats:?}");
        assert!(
            stats.core.resident_pages_max > 512 + 64,
            "{fault_mode:?}: resident max {}",
            stats.core.resident_pages_max
        );
        assert!(stats.core.swap_outs_written > 0, "{fault_mode:?}: swap was used before it filled");
        assert_eq!((stats.core.lost_pages, stats.core.device_errors), (0, 0), "{fault_mode:?}");
        drop(region);
    }
}

/// A hot set the program only reads, beside a stream of new pages it writes once: the
/// CLOCK alone sees writes, never reads, so it evicts the hot pages and reads them back
/// again and again. Parked first, a hot page is touched before its turn to be written
/// out comes, and comes back with no device read. Returns the counts of the mixed part,
/// whose device reads are all of hot pages (new pages are zero-filled).
fn hot_reads(park_pages: u64) -> PagerStats {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(96, 1, 16)).unwrap());
    let config = {
        let mut config = config(FaultMode::HandlerThreads(2), 1024);
        config.core.park_pages = park_pages;
        config.core.readahead_pages = 0;
        config
    };
    let pager = Pager::new(device, config).unwrap();
    let (hot, stream) = (600u64, 15_000u64);
    let pages = hot + stream;
    let mut region = pager.alloc(pages * PAGE_BYTES as u64, 0).unwrap();
    let memory = region.as_mut_slice();
    for page in 0..hot {
        fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
    }
    let before = pager.stats();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(33);
    for step in 0..4 * stream {
        if step % 4 == 3 {
            let page = hot + step / 4;
            fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
        } else {
            let page = rng.next_u64() % hot;
            check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
        }
    }
    let mixed = pager.stats().since(&before);
    for page in 0..pages {
        check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
    }
    assert_eq!(pager.stats().core.lost_pages, 0);
    mixed
}

#[test]
fn parked_pages_the_program_reads_come_back_without_a_device_read() {
    let parked = hot_reads(256);
    let clock = hot_reads(0);
    assert!(parked.core.pages_parked > 5_000 && parked.core.parked_touched > 50, "{parked:?}");
    assert_eq!(clock.core.pages_parked, 0, "{clock:?}");
    // Hot pages stay: far fewer reads than the CLOCK that cannot see them read (measured:
    // 446 against 10571 on an idle machine; with a 512-page list, crowding the hot set,
    // 6199). Under load the evictor falls behind and the list does less (2919-4639
    // against 10283-10808 with other tests or a server busy on the CPUs; the 4x this
    // asked once failed CI so): a list blind to reads would read about as many.
    assert!(
        parked.core.swap_in_reads * 3 < clock.core.swap_in_reads * 2,
        "parked {} reads against {} without: {parked:?}",
        parked.core.swap_in_reads,
        clock.core.swap_in_reads
    );
}

/// With asynchronous write protection no write faults, and every value survives: pages
/// read back keep their slots (swap cache), some are then written with no fault to say
/// so, and the digest taken when they are parked must tell which (a page kept clean by
/// mistake would read back its old version).
#[test]
fn writes_seen_without_faults_lose_nothing() {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(64, 1, 16)).unwrap());
    let config = asynchronous(config(FaultMode::HandlerThreads(2), 512), true);
    let pager = Pager::new(device, config).unwrap();
    let pages = 4096u64;
    let mut region = pager.alloc(pages * PAGE_BYTES as u64, 0).unwrap();
    let memory = region.as_mut_slice();
    // Every fourth page is never written: it reads zero (a zero page mapped where the
    // hand's protection ran nearby, which must not leave a marker in its way).
    let untouched = |page: u64| page % 4 == 3;
    let mut version = vec![1u64; pages as usize];
    for page in (0..pages).filter(|&page| !untouched(page)) {
        fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(34);
    for pass in 0..4u64 {
        // Every page read (swapped back in, keeping its slot), a third then written; and
        // between them, pages of a hot set, which the hand finds referenced (parked and
        // touched) and protects again with the never-written pages between them in reach.
        for page in (0..pages).filter(|&page| !untouched(page)) {
            let bytes = &mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES];
            check(bytes, page, version[page as usize]);
            if rng.next_u64() % 3 == pass % 3 {
                version[page as usize] += 1;
                fill(bytes, page, version[page as usize]);
            }
            let hot = rng.next_u64() % 256;
            if !untouched(hot) {
                check(&memory[hot as usize * PAGE_BYTES..][..PAGE_BYTES], hot, version[hot as usize]);
            }
        }
    }
    // The never-written pages first, out of order (a read fault out of sequence maps the
    // zero page, `UFFDIO_ZEROPAGE`, which a marker would refuse).
    for step in 0..pages {
        let page = (step * 1237) % pages;
        let bytes = &memory[page as usize * PAGE_BYTES..][..PAGE_BYTES];
        if untouched(page) {
            assert!(bytes.iter().all(|&byte| byte == 0), "page {page}, never written, is not zero");
        }
    }
    for page in (0..pages).filter(|&page| !untouched(page)) {
        check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, version[page as usize]);
    }
    let stats = pager.stats();
    assert_eq!(stats.core.write_protect_faults, 0, "{stats:?}");
    assert_eq!((stats.core.lost_pages, stats.core.park_refused), (0, 0), "{stats:?}");
    assert!(stats.core.pages_parked > pages, "{stats:?}");
    // Cached pages written with no fault were caught by their digests, and the others
    // were evicted clean.
    assert!(stats.core.swap_cache_digest_dirtied > 100 && stats.engine.swap_cache_hits > 100, "{stats:?}");
}

/// Linux 6.18 can move a page and fail the call (`EEXIST`, nothing counted as moved:
/// `park_outcome` in the pager core). With every third successful move reported failed,
/// parking and bringing pages back, synchronously and asynchronously protected, lose
/// nothing: the shells find where each page went by the page map. (Trusting the error,
/// the pager held such a page resident with its bytes at the shadow page, and aborted.)
#[test]
fn moves_the_kernel_reports_failed_are_found_done() {
    for wp_async in [false, true] {
        let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(64, 1, 16)).unwrap());
        let mut config = asynchronous(config(FaultMode::HandlerThreads(2), 512), wp_async);
        config.misreport_moves_every = 3;
        let pager = Pager::new(device, config).unwrap();
        let pages = 2048u64;
        let mut region = filled_region(&pager, pages);
        let memory = region.as_mut_slice();
        let mut version = vec![1u64; pages as usize];
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(52);
        for _pass in 0..3 {
            for page in 0..pages {
                let bytes = &mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES];
                check(bytes, page, version[page as usize]);
                if rng.next_u64() % 3 == 0 {
                    version[page as usize] += 1;
                    fill(bytes, page, version[page as usize]);
                }
                // A hot set, touched while parked: moved back (or found moved back).
                let hot = rng.next_u64() % 256;
                check(&memory[hot as usize * PAGE_BYTES..][..PAGE_BYTES], hot, version[hot as usize]);
            }
        }
        for page in 0..pages {
            check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, version[page as usize]);
        }
        let stats = pager.stats();
        assert!(stats.core.pages_parked > pages && stats.core.parked_touched > 0, "wp_async {wp_async}: {stats:?}");
        assert!(stats.moves_misreported > stats.core.pages_parked / 4, "wp_async {wp_async}: {stats:?}");
        assert_eq!((stats.core.lost_pages, stats.core.park_occupied), (0, 0), "wp_async {wp_async}: {stats:?}");
    }
}

/// A region of `pages` pages, each written once (version 1).
fn filled_region(pager: &Pager, pages: u64) -> Region {
    let mut region = pager.alloc(pages * PAGE_BYTES as u64, 0).unwrap();
    let memory = region.as_mut_slice();
    for page in 0..pages {
        fill(&mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
    }
    region
}

/// Forks through the pager a child that only sleeps until `kill_child`.
fn fork_sleeping_child(pager: &Pager) -> libc::pid_t {
    // SAFETY: the child only sleeps until the parent kills it.
    let child = unsafe { pager.fork(|| libc::fork()) };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        loop {
            // SAFETY: waiting for the parent's signal.
            unsafe { libc::pause() };
        }
    }
    child
}

fn kill_child(child: libc::pid_t) {
    // SAFETY: our child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
}

/// With asynchronous write protection a page shared with a fork's child cannot be
/// parked, and nothing may write it out where the program can write it: it is made the
/// parent's alone (a write fault with no byte changed), parked at the hand's next pass,
/// and the pages the program only reads after the fork do not pile up over the budget.
#[test]
fn pages_shared_with_a_fork_are_unshared_and_evicted_without_faults() {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
    let budget = 1024u64;
    let config = asynchronous(config(FaultMode::HandlerThreads(2), budget), true);
    let slack = config.core.slack_pages;
    let pager = Pager::new(device, config).unwrap();
    let pages = 4096u64;
    let mut region = filled_region(&pager, pages);
    let memory = region.as_mut_slice();
    let child = fork_sleeping_child(&pager);
    let before = pager.stats();
    // Read only, twice over: the pages resident at the fork must leave to make room.
    for _ in 0..2 {
        for page in 0..pages {
            check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
        }
    }
    let read = pager.stats().since(&before);
    kill_child(child);
    for page in 0..pages {
        check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1);
    }
    let stats = pager.stats();
    assert!(read.core.park_refused > 0 && read.pages_unshared > 0, "{read:?}");
    assert_eq!(
        (read.core.write_protect_faults, read.core.budget_overruns, stats.core.lost_pages),
        (0, 0, 0),
        "{read:?}"
    );
    assert!(stats.core.resident_pages_max <= budget + slack, "{stats:?}");
}

/// Pages parked when the program forks are shared with the child: the kernel will not
/// move them back (`EBUSY`), so a touch copies them, and the parent reads and writes
/// them exactly while the child lives.
#[test]
fn parked_pages_shared_with_a_fork_come_back_by_copy() {
    let device: Arc<dyn ZonedDevice> = Arc::new(MemDevice::new(geometry(48, 1, 16)).unwrap());
    let config = {
        let mut config = config(FaultMode::HandlerThreads(2), 1024);
        config.core.park_pages = 256;
        config.core.readahead_pages = 0;
        config
    };
    let pager = Pager::new(device, config).unwrap();
    let pages = 4096u64;
    let mut region = filled_region(&pager, pages);
    let memory = region.as_mut_slice();
    assert!(pager.stats().core.pages_parked > 0, "{:?}", pager.stats());
    let child = fork_sleeping_child(&pager);
    // Newest first: the pages parked at the fork are among the last written.
    for page in (0..pages).rev() {
        let bytes = &mut memory[page as usize * PAGE_BYTES..][..PAGE_BYTES];
        check(bytes, page, 1);
        if page % 2 == 0 {
            fill(bytes, page, 2);
        }
    }
    kill_child(child);
    for page in 0..pages {
        check(&memory[page as usize * PAGE_BYTES..][..PAGE_BYTES], page, 1 + (page % 2 == 0) as u64);
    }
    let stats = pager.stats();
    assert!(stats.unparks_copied > 0, "no parked page came back by copy: {stats:?}");
    assert_eq!(stats.core.lost_pages, 0);
}
