//! `znswap run` with unmodified programs: `znswap-heap-check` uses its heap as real
//! programs do (a heap 4x the budget, kernel I/O into evicted pages, threads, realloc,
//! discards, fork, exec, daemonizing) and checks every byte it reads back. Each test
//! runs it under the pager on a small device of its own and also checks the figures
//! the pager reports (pages really went to the device, the budget held).

mod common;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const ZNSWAP: &str = env!("CARGO_BIN_EXE_znswap");
const HEAP_CHECK: &str = env!("CARGO_BIN_EXE_znswap-heap-check");
const BUDGET_MIB: u64 = 16;
/// Far beyond any run here (seconds each): a hang fails its test, naming the command,
/// instead of holding the whole test run until CI gives up.
const RUN_LIMIT: Duration = Duration::from_secs(300);

fn output_within_limit(command: &mut Command) -> Output {
    common::output_within_limit(command, RUN_LIMIT)
}

fn ensure_library() {
    common::ensure_built(ZNSWAP, "znswap-preload");
}

fn ensure_built(package: &str) -> PathBuf {
    common::ensure_built(ZNSWAP, package)
}

struct Run {
    output: Output,
    report: Option<serde_json::Value>,
    took: Duration,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    /// A figure of the run's report, by its path (`pager.swap_outs_written`).
    fn figure(&self, name: &str) -> u64 {
        let report = self.report.as_ref().unwrap_or_else(|| panic!("no report; stderr: {}", self.stderr()));
        figure_at(&report["report"], name)
    }
}

/// The figure at `path` (`pager.swap_outs_written`) of a run's report.
fn figure_at(report: &serde_json::Value, path: &str) -> u64 {
    let pointer = format!("/{}", path.replace('.', "/"));
    report.pointer(&pointer).and_then(|value| value.as_u64()).unwrap_or_else(|| panic!("no {path} in {report}"))
}

fn device(dir: &Path) -> PathBuf {
    let path = dir.join("run.zns");
    let status = Command::new(ZNSWAP)
        .args(["device", "create", "--zones", "16", "--zone-size", "16M", "--path"])
        .arg(&path)
        .output()
        .expect("znswap device create");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    path
}

fn run(args: &[&str]) -> Run {
    run_with(args, &[], &[])
}

/// `znswap run` with `flags` of its own of the heap checker with `args`, in `env`.
fn run_with(args: &[&str], env: &[(&str, &Path)], flags: &[&str]) -> Run {
    ensure_library();
    let dir = tempfile::tempdir().unwrap();
    let device = device(dir.path());
    let stats = dir.path().join("stats.json");
    let started = Instant::now();
    let output = output_within_limit(
        Command::new(ZNSWAP)
            .arg("run")
            .arg("--device")
            .arg(&device)
            .arg("--memory")
            .arg(format!("{BUDGET_MIB}M"))
            .arg("--stats")
            .arg(&stats)
            .args(flags)
            .arg("--")
            .arg(HEAP_CHECK)
            .args(args)
            .envs(env.iter().copied()),
    );
    let report = std::fs::read(&stats).ok().map(|bytes| serde_json::from_slice(&bytes).expect("stats JSON"));
    Run { output, report, took: started.elapsed() }
}

/// Ran to completion with every byte checked, and its heap beyond the budget really
/// went to the device and came back, within the budget and the pager's slack.
fn assert_paged(run: &Run, what: &str) {
    assert!(
        run.output.status.success() && run.stdout().starts_with(&format!("ok {what}")),
        "status {:?}\nstdout: {}\nstderr: {}",
        run.output.status,
        run.stdout(),
        run.stderr()
    );
    assert!(run.figure("pager.swap_outs_written") > 0, "nothing was swapped out: {:?}", run.report);
    assert!(run.figure("pager.swap_in_reads") > 0, "nothing was swapped in: {:?}", run.report);
    let budget_pages = BUDGET_MIB * 256;
    // The slack is an eighth of the budget here (`PagerConfig::slack_pages`), and each of
    // the 2 handler threads may map a fault's page and the 63 untouched pages after it
    // at once (`ZERO_FILL_AROUND_PAGES`) as it reaches the slack.
    let bound = budget_pages + budget_pages / 8 + 2 * 64;
    let tree = run.report.as_ref().is_some_and(|summary| !summary["tree"].is_null());
    if tree && run.figure("forks") > 0 {
        // Serving a tree, a fork's child joins with its copy-on-write pages counted as
        // its own (the pager's count goes past what is resident): the tree's memory, as
        // a cgroup charges it, is what `--memory` holds, with room for what a budget this
        // small cannot cover (the launcher's tables, the processes' unpaged memory).
        let summary = run.report.as_ref().expect("a report");
        let most = figure_at(&summary["tree"], "memory_used_max_bytes");
        assert!(most <= (BUDGET_MIB + 32) << 20, "the tree held {most} B in {BUDGET_MIB} MiB: {summary}");
    } else {
        assert!(run.figure("pager.resident_pages_max") <= bound, "resident max over {bound} pages: {:?}", run.report);
    }
    assert_eq!(run.figure("pager.lost_pages"), 0);
}

#[test]
fn a_heap_four_times_the_budget_reads_back_exactly() {
    let run = run(&["heap", "64"]);
    assert_paged(&run, "heap 64 MiB");
    assert!(run.stderr().contains("swapped out / in"), "no summary: {}", run.stderr());
}

#[test]
fn the_kernel_reads_and_writes_evicted_heap_pages() {
    // write() from, read() into, send()/recv() through evicted pages.
    assert_paged(&run(&["io", "64"]), "io 64 MiB");
}

#[test]
fn threads_share_and_own_paged_memory() {
    assert_paged(&run(&["threads", "64", "4"]), "threads 4");
}

#[test]
fn threads_started_before_the_pager_keep_their_bytes_across_its_start_up() {
    // A library preloaded behind the pager's starts them from its constructor, which
    // the loader runs before the pager's; the launcher keeps the user's LD_PRELOAD.
    let early = ensure_built("znswap-early-threads");
    let run = run_with(&["early-threads"], &[("LD_PRELOAD", &early)], &[]);
    // 2 threads x 24 chunks, a third of them freed.
    assert_paged(&run, "early threads checked 32 chunks");
}

#[test]
fn a_buffer_grown_by_realloc_past_the_budget_keeps_its_bytes() {
    assert_paged(&run(&["realloc", "64"]), "realloc to 64 MiB");
}

#[test]
fn discarded_pages_read_back_zero_and_the_rest_is_intact() {
    assert_paged(&run(&["dontneed", "64"]), "dontneed 13 of 64 chunks");
}

#[test]
fn a_forked_child_sees_the_heap_as_at_the_fork_while_the_parent_rewrites_it() {
    let run = run(&["fork", "64"]);
    assert_paged(&run, "fork: 2 children checked 64 MiB snapshots");
    assert_eq!(run.figure("forks"), 2);
}

/// `--encrypt`: the same heap and forks, every page sealed on its way out and opened
/// on its way back (the child's reads too), every byte checked.
#[test]
fn an_encrypted_heap_and_its_forked_children_read_back_exactly() {
    let run = run_with(&["fork", "64"], &[], &["--encrypt"]);
    assert_paged(&run, "fork: 2 children checked 64 MiB snapshots");
    assert_eq!(run.figure("forks"), 2);
    // Every page written from the heap was sealed; a victim the program discarded
    // during its swap-out (mimalloc's purges are discards) is written as zeroes.
    assert!(
        run.figure("pager.pages_sealed") + run.figure("pager.swap_outs_zeroed")
            >= run.figure("pager.swap_outs_written"),
        "{:?}",
        run.report
    );
    assert_eq!(run.figure("pager.pages_failed_open"), 0);
}

/// With an inactive list, victims are parked (moved out of the program's reach) before
/// they are written out: a heap four times the budget, discards of parts of it, and
/// forked children reading their snapshot (parked pages among it, while the parent
/// brings its own back: shared with a child, they cannot move, and are copied).
#[test]
fn parked_pages_read_back_exactly_through_discards_and_forks() {
    for (args, what) in [
        (["heap", "64"], "heap 64 MiB"),
        (["dontneed", "64"], "dontneed 13 of 64 chunks"),
        (["fork", "64"], "fork: 2 children checked 64 MiB snapshots"),
    ] {
        let run = run_with(&args, &[], &["--park", "4M"]);
        assert_paged(&run, what);
        assert!(run.figure("pager.pages_parked") > 1000, "{what}: few pages parked: {:?}", run.report);
        assert!(run.stderr().contains("inactive list"), "{what}: no inactive list in the summary: {}", run.stderr());
    }
}

/// `--no-reference-sampling` (reference bits from faults only) pages the heap as
/// correctly, with and without an inactive list.
#[test]
fn without_reference_sampling_the_heap_reads_back_exactly() {
    for flags in [&["--no-reference-sampling"][..], &["--no-reference-sampling", "--park", "4M"]] {
        let run = run_with(&["heap", "64"], &[], flags);
        assert_paged(&run, "heap 64 MiB");
    }
}

/// `--compressed-pool`: a heap whose pages compress reads back exactly with the pool
/// serving swap-ins (and within the budget, the pool taken out of it); one whose pages
/// do not is refused by the pool and pages as without it; with `--encrypt` it is
/// refused before the program runs.
#[test]
fn a_compressed_pool_serves_swap_ins_and_every_byte_reads_back() {
    let run = run_with(&["compressible", "64"], &[], &["--compressed-pool", "2M"]);
    assert!(run.output.status.success() && run.stdout().starts_with("ok compressible 64 MiB"), "{}", run.stderr());
    assert_eq!(run.figure("pager.lost_pages"), 0);
    assert!(run.figure("pager.compressed_pool_bytes") == 2 << 20, "{:?}", run.report);
    let (kept, served) =
        (run.figure("pager.compressed_pool_pages_stored"), run.figure("pager.compressed_pool_pages_served"));
    assert!(kept > 16384 && served > 1024, "kept {kept}, served {served}: {}", run.stderr());
    assert!(
        run.figure("pager.compressed_pool_stored_raw_bytes") > 3 * run.figure("pager.compressed_pool_stored_bytes")
    );
    assert!(run.stderr().contains("compressed pool"), "{}", run.stderr());
    // The pool is part of --memory: the heap's budget is what is left of it.
    let bound = (BUDGET_MIB - 2) * 256 * 9 / 8 + 2 * 64;
    assert!(run.figure("pager.resident_pages_max") <= bound, "resident max over {bound} pages: {:?}", run.report);

    let random = run_with(&["heap", "64"], &[], &["--compressed-pool", "2M"]);
    assert_paged(&random, "heap 64 MiB");
    assert_eq!(random.figure("pager.compressed_pool_pages_stored"), 0, "{:?}", random.report);
    // Every page refused, most of them not even tried once the refusals ran on.
    let (refused, skipped) =
        (random.figure("pager.compressed_pool_pages_refused"), random.figure("pager.compressed_pool_pages_skipped"));
    assert!(refused + skipped > 16384 && skipped > 8 * refused, "refused {refused}, skipped {skipped}");

    let sealed = run_with(&["heap", "64"], &[], &["--compressed-pool", "2M", "--encrypt"]);
    assert!(
        !sealed.output.status.success() && sealed.stderr().contains("sealed pages do not compress"),
        "{}",
        sealed.stderr()
    );
}

/// The default: the launcher pages the program's tree from its own process, as the
/// daemon pages a tenant: the heap paged from there, every byte checked, through the
/// kernel's own reads and writes, threads, discards (each taken by the launcher's pager
/// before the program zaps) and sealing; the figures come from the launcher's pager.
#[test]
fn a_heap_served_from_the_launchers_process_reads_back_exactly() {
    for (args, flags, what) in [
        (&["heap", "64"][..], &[][..], "heap 64 MiB"),
        (&["io", "64"], &[], "io 64 MiB"),
        (&["threads", "64", "4"], &[], "threads 4"),
        (&["dontneed", "64"], &[], "dontneed 13 of 64 chunks"),
        (&["heap", "64"], &["--encrypt"], "heap 64 MiB"),
    ] {
        let run = run_with(args, &[], flags);
        assert_paged(&run, what);
        assert!(run.stderr().contains("swapped out / in"), "{what}: no summary: {}", run.stderr());
        assert!(run.stderr().contains("process tree"), "{what}: not served as a tree: {}", run.stderr());
    }
}

/// With --in-process a fork's child is not the pager's: it serves its own heap from its
/// snapshot of the fork; a child that executes a program runs it, and the parent's heap
/// reads back exactly. Serving the tree, the child is paged within the tenant and
/// reads its parent's pages as they were at the fork.
#[test]
fn a_forks_child_reads_its_parents_pages_in_either_mode() {
    for flags in [&["--in-process"][..], &[][..]] {
        let run = run_with(&["fork", "64"], &[], flags);
        assert_paged(&run, "fork");
        let run = run_with(&["fork-exec", "64"], &[], flags);
        assert_paged(&run, "fork-exec: 2 commands run beside 64 MiB");
    }
}

#[test]
fn an_execd_program_runs_without_the_pager_in_process() {
    let run = run_with(&["exec"], &[], &["--in-process"]);
    assert!(run.output.status.success(), "stdout: {}\nstderr: {}", run.stdout(), run.stderr());
    assert_eq!(run.stdout().trim(), "ok exec without the pager");
}

/// The pager's tables come from an allocator that asks for huge pages, each of which
/// would make a touched byte 2 MiB resident against --memory: none in a paged process.
#[test]
fn a_paged_process_has_no_transparent_huge_pages() {
    let run = run(&["thp"]);
    assert!(run.output.status.success(), "stdout: {}\nstderr: {}", run.stdout(), run.stderr());
    assert_eq!(run.stdout().trim(), "ok thp off");
}

/// With --in-process a pager lives in the program: a forked child that outlives it
/// would lose its pager, so the run is refused at once.
#[test]
fn a_program_that_daemonizes_is_refused_at_once_in_process() {
    let run = run_with(&["daemonize"], &[], &["--in-process"]);
    assert!(!run.output.status.success(), "a daemon was accepted: {}", run.stderr());
    assert!(run.stderr().contains("daemonized"), "stderr: {}", run.stderr());
    // The child would sleep 60 s: the error comes well before (seconds; the bound leaves
    // room for two loaded cores, where 8 s against a 10 s sleep once failed).
    assert!(run.took < Duration::from_secs(30), "took {:?}", run.took);
}

/// Serving the tree, the launcher's pager outlives the program: a child that outlives
/// it is served until it ends (said when the program exits), and the run is the
/// program's.
#[test]
fn a_program_that_daemonizes_is_served_until_its_daemon_ends() {
    let run = run(&["daemonize", "3"]);
    assert!(run.output.status.success(), "stderr: {}", run.stderr());
    assert!(run.stderr().contains("1 process it started still runs"), "stderr: {}", run.stderr());
    assert!(run.took >= Duration::from_secs(3), "the launcher waited {:?}, not for its daemon", run.took);
}

#[test]
fn the_programs_exit_status_and_signals_come_back() {
    ensure_library();
    let dir = tempfile::tempdir().unwrap();
    let device = device(dir.path());
    let status = |script: &str| {
        output_within_limit(
            Command::new(ZNSWAP)
                .args(["run", "--memory", "16M", "--device"])
                .arg(&device)
                .args(["--", "/bin/sh", "-c", script]),
        )
        .status
        .code()
    };
    assert_eq!(status("exit 7"), Some(7));
    assert_eq!(status("kill -TERM $$"), Some(128 + libc::SIGTERM));
}

#[test]
fn bad_input_gets_a_clear_error() {
    ensure_library();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.zns");
    let output =
        output_within_limit(Command::new(ZNSWAP).args(["run", "--device"]).arg(&missing).args(["--", "/bin/true"]));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no device at") && stderr.contains("znswap device create"), "{stderr}");

    let device = device(dir.path());
    let output = output_within_limit(
        Command::new(ZNSWAP).args(["run", "--memory", "1M", "--device"]).arg(&device).args(["--", "/bin/true"]),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("too small"), "{stderr}");

    let output = output_within_limit(
        Command::new(ZNSWAP).args(["run", "--arena", "20G", "--device"]).arg(&device).args(["--", "/bin/true"]),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("more than the allocator can manage"), "{stderr}");

    let output = output_within_limit(
        Command::new(ZNSWAP)
            .env("ZNSWAP_PRELOAD", dir.path().join("missing.so"))
            .args(["run", "--device"])
            .arg(&device)
            .args(["--", "/bin/true"]),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("ZNSWAP_PRELOAD"), "{stderr}");
}

#[test]
fn the_programs_own_mappings_are_paged_through_munmap_mremap_map_fixed_and_mprotect() {
    let run = run(&["mmap", "64"]);
    assert_paged(&run, "mmap 80 MiB");
    // 10 mappings, the one mremap moved, and 4 made after the unmaps.
    assert!(run.figure("mmaps_paged") >= 15, "{:?}", run.report);
    assert_eq!(run.figure("mapped_bytes"), 4 * (8 << 20), "only the last 4 mappings are left: {:?}", run.report);
}

// What a new user met (issue 32), each as it behaves now.

/// `znswap run` on `device` with `args`, running `program`.
fn launch(device: &Path, args: &[&str], program: &[&str]) -> Output {
    output_within_limit(Command::new(ZNSWAP).arg("run").arg("--device").arg(device).args(args).arg("--").args(program))
}

/// Every line of an error said once (a cause already in the message is not repeated).
fn assert_said_once(stderr: &str) {
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    for (index, line) in lines.iter().enumerate() {
        let text = line.trim_start_matches("caused by: ").trim_start_matches("error: ");
        let earlier = lines[..index].iter().any(|earlier| earlier.contains(text));
        assert!(!earlier, "said twice: {line:?} in\n{stderr}");
    }
}

#[test]
fn arguments_and_the_stats_path_are_checked_before_the_program_runs() {
    ensure_library();
    let dir = tempfile::tempdir().unwrap();
    let device = device(dir.path());
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let program = ["/bin/sh", "-c", touch.as_str()];
    let refused = |args: &[&str], expected: &[&str], absent: &[&str]| {
        let output = launch(&device, args, &program);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!output.status.success(), "{args:?} was accepted: {stderr}");
        assert!(!marker.exists(), "{args:?}: the program ran before the arguments were checked");
        for text in expected {
            assert!(stderr.contains(text), "{args:?}: no {text:?} in {stderr}");
        }
        for text in absent {
            assert!(!stderr.contains(text), "{args:?}: {text:?} in {stderr}");
        }
        assert_said_once(&stderr);
    };
    refused(&["--stats", "/nonexistent/dir/run.json"], &["--stats /nonexistent/dir/run.json"], &[]);
    // The user gave --memory only: the message names it, not the --arena they never gave.
    refused(&["--memory", "9G"], &["--memory 9 GiB", "at most 8 GiB"], &["--arena"]);
    refused(&["--readahead", "99"], &["--readahead", "0..=32"], &[]);
    refused(&["--handler-threads", "0"], &["--handler-threads"], &[]);
    // And a good run does run it.
    let output = launch(&device, &["--memory", "16M"], &program);
    assert!(output.status.success() && marker.exists(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn a_device_with_too_few_zones_is_refused_naming_the_zones_it_needs() {
    ensure_library();
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small.zns");
    let created = Command::new(ZNSWAP)
        .args(["device", "create", "--zones", "4", "--zone-size", "16M", "--device"])
        .arg(&small)
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let output = launch(&small, &["--memory", "16M"], &["/bin/true"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a 4-zone device was taken: {stderr}");
    assert!(stderr.contains("has 4 zones") && stderr.contains("needs at least"), "{stderr}");
    assert!(!stderr.contains("watermark"), "an internal formula instead of the minimum: {stderr}");
    assert_said_once(&stderr);
}

#[test]
fn the_device_counters_are_saved_by_run() {
    ensure_library();
    let dir = tempfile::tempdir().unwrap();
    let device = device(dir.path());
    let output = launch(&device, &["--memory", "16M"], &[HEAP_CHECK, "heap", "64"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report = Command::new(ZNSWAP).args(["device", "report", "--json", "--device"]).arg(&device).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("device report JSON");
    // 64 MiB in a 16 MiB budget: about 48 MiB went to the device, at least.
    let written = report["counters"]["bytes_written"].as_u64().unwrap();
    assert!(written >= 32 << 20, "device report after a run: {written} B written: {report}");
    assert!(report["counters"]["appends"].as_u64().unwrap() > 0, "{report}");
}

#[test]
fn the_summary_says_how_the_program_ended() {
    ensure_library();
    let dir = tempfile::tempdir().unwrap();
    let device = device(dir.path());
    let stderr = |output: &Output| String::from_utf8_lossy(&output.stderr).into_owned();

    let killed = launch(&device, &["--memory", "16M"], &["/bin/sh", "-c", "kill -KILL $$"]);
    assert_eq!(killed.status.code(), Some(128 + libc::SIGKILL));
    assert!(stderr(&killed).contains("was killed by SIGKILL"), "{}", stderr(&killed));
    assert!(!stderr(&killed).contains("wrapper"), "a hint about wrappers for a signal: {}", stderr(&killed));

    // `_exit` runs no exit handlers; the figures still come (the library wraps it).
    let stats = dir.path().join("exit.json");
    let fast =
        launch(&device, &["--memory", "16M", "--stats", stats.to_str().unwrap()], &[HEAP_CHECK, "exit-fast", "64"]);
    assert_eq!(fast.status.code(), Some(3), "{}", stderr(&fast));
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert!(summary["report"]["at_exit"].as_bool().unwrap(), "{summary}");
    assert!(figure_at(&summary["report"], "pager.swap_outs_written") > 0, "{summary}");
    assert!(stderr(&fast).contains("exited (3)"), "{}", stderr(&fast));

    // A program that executes another: held with it in the tree, and said so; the
    // in-process pager says the other ran unpaged.
    let execd = launch(&device, &["--memory", "16M"], &["/bin/sh", "-c", "sleep 0.5; exec /bin/true"]);
    assert!(execd.status.success());
    assert!(
        stderr(&execd).contains("paged as one") && !stderr(&execd).contains("without the pager"),
        "{}",
        stderr(&execd)
    );
    let alone = launch(&device, &["--memory", "16M", "--in-process"], &["/bin/sh", "-c", "sleep 0.5; exec /bin/true"]);
    assert!(alone.status.success());
    assert!(stderr(&alone).contains("executed") && stderr(&alone).contains("without the pager"), "{}", stderr(&alone));
    // Each term of the table explained.
    assert!(stderr(&execd).contains("missing: ") && stderr(&execd).contains("WAF: "), "{}", stderr(&execd));
}

/// A tree of many short-lived processes (a shell script's) costs the launcher what one
/// of them does: each process's tables (sized by the arena, mostly never touched) are
/// freed with it and were never resident. (glibc's default once made every table after
/// the first come from the heap, zeroed page by page and kept: `large_allocations_mapped`.)
#[test]
fn the_launchers_memory_does_not_grow_with_the_processes_a_tree_starts() {
    ensure_library();
    let dir = tempfile::tempdir().unwrap();
    let device = device(dir.path());
    let stats = dir.path().join("stats.json");
    // An 8 GiB arena: two million pages, about 18 MiB of tables per process served.
    let output = launch(
        &device,
        &["--memory", "16M", "--arena", "8G", "--stats", stats.to_str().unwrap()],
        &["/bin/sh", "-c", "i=0; while [ $i -lt 30 ]; do /bin/sh -c true; i=$((i+1)); done"],
    );
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert!(figure_at(&summary, "tree.memory_used_max_bytes") > 0, "{summary}");
    let pager = figure_at(&summary, "tree.pager_memory_max_bytes");
    assert!(pager > 0 && pager < 16 << 20, "the launcher held {} MiB for 31 processes: {summary}", pager >> 20);
}

#[test]
fn a_slow_exit_after_ctrl_c_is_explained() {
    ensure_library();
    let dir = tempfile::tempdir().unwrap();
    let device = device(dir.path());
    // A program that takes 3 s to exit after SIGINT. (Its sleeps are the program's
    // work: the wait the launcher explains, and a child to wait for.)
    let mut child = Command::new(ZNSWAP)
        .args(["run", "--memory", "16M", "--device"])
        .arg(&device)
        .args(["--", "/bin/sh", "-c", "trap 'kill $!; sleep 3; exit 0' INT; sleep 30 >/dev/null 2>&1 & wait"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Signalled once its trap is set: the shell has started its `sleep 30`, which it
    // does after the trap (the launcher takes signals from before it starts the shell).
    common::wait_until(Duration::from_secs(30), "the shell to start its sleep, its trap set", || {
        assert!(child.try_wait().unwrap().is_none(), "the launcher ended before it was signalled");
        let shells = common::children(child.id());
        shells
            .iter()
            .flat_map(|&shell| common::children(shell))
            .any(|pid| common::command_name(pid).as_deref() == Some("sleep"))
    });
    // A signal to the launcher is the watch's alone: the pager's threads block it (one
    // that did not would take it whenever the watch is not waiting, and die of it).
    let tasks = std::fs::read_dir(format!("/proc/{}/task", child.id())).unwrap();
    let mut threads = 0;
    for task in tasks {
        let task = task.unwrap().path();
        if task.file_name().unwrap().to_str() == Some(&child.id().to_string()) {
            continue; // the watch, which unblocks them only inside `sigtimedwait`
        }
        let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        let Some(blocked) = status.lines().find_map(|line| line.strip_prefix("SigBlk:")) else { continue };
        let blocked = u64::from_str_radix(blocked.trim(), 16).unwrap();
        let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        assert_ne!(blocked & (1 << (libc::SIGINT - 1)), 0, "the launcher's thread {} takes SIGINT", name.trim());
        threads += 1;
    }
    assert!(threads > 0, "the launcher serves the tree with threads of its own");
    // SAFETY: signals the launcher this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("got SIGINT") && stderr.contains("still exiting"), "no word while it exited: {stderr}");
}

#[test]
fn blocks_aligned_beyond_what_the_allocator_serves_from_its_arena_are_paged_too() {
    // 256 KiB alignment: mimalloc takes such blocks from the OS, outside the paged arena,
    // unless the library carves them from the paged heap.
    let run = run(&["aligned", "64", "256"]);
    assert_paged(&run, "aligned 64 MiB at 256 KiB");
    assert_eq!(run.figure("overflow_bytes"), 0, "allocated outside the paged arena: {:?}", run.report);
}

#[test]
fn the_programs_anonymous_memory_stays_within_memory() {
    // As under a memory cgroup's limit: the heap, what the pager does not page and the
    // pager's own memory together; the paged heap gets what the rest leaves. (Mapped
    // files are not counted: the cgroup takes them back from the program.)
    ensure_library();
    let dir = tempfile::tempdir().unwrap();
    let device = device(dir.path());
    let stats = dir.path().join("stats.json");
    let memory = 48u64 << 20;
    let output =
        launch(&device, &["--memory", "48M", "--stats", stats.to_str().unwrap()], &[HEAP_CHECK, "heap", "128"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let report = &summary["report"];
    let figure = |name: &str| figure_at(report, name);
    assert_eq!(figure("memory_bytes"), memory);
    assert!(figure("pager.swap_outs_written") > 0 && figure("pager.swap_in_reads") > 0, "{report}");
    // 4 MiB of give: the governor samples the tree every 100 ms and sets the budget from
    // what the rest holds, so memory outside the paged heap that grows between samples
    // (a page table's pages, the program's own mappings) shows before the budget follows
    // it. (With 1 MiB this failed about one run in four, 3-4 MiB over, with the paged
    // heap itself within its budget, when the launcher's tables were counted too.)
    assert!(figure("memory_used_max_bytes") <= memory + (4 << 20), "anonymous memory over --memory: {report}");
    assert!(figure("memory_used_max_bytes") > memory / 2, "the heap used what --memory gives: {report}");
    // The pager's own memory, in the launcher, is reported beside it (not counted).
    let pager_memory = figure_at(&summary["tree"], "pager_memory_max_bytes");
    assert!(pager_memory > 1 << 20 && pager_memory < 64 << 20, "the pager's own memory, {pager_memory} B: {summary}");
    // Counted from the program's anonymous memory (the arena's pages among it), not its
    // whole resident set.
    assert!(figure("rss_anon_bytes") >= figure("pager.resident_pages") * 4096, "{report}");
    // CPU by thread role: the pager's threads did work, and are a part of the whole.
    let pager_cpu = figure("pager.fault_cpu_ns") + figure("pager.evictor_cpu_ns") + figure("pager.io_cpu_ns");
    assert!(pager_cpu > 0 && figure("cpu_ns") >= pager_cpu + figure("stats_thread_cpu_ns"), "{report}");
    // What the program holds outside its paged heap (stacks, its own mappings: most of a
    // MiB here) comes out of the heap's budget; the launcher's tables do not.
    assert!(
        figure("budget_bytes") < memory - (256 << 10),
        "the rest of the anonymous memory was not counted: {report}"
    );
}

/// `znswap daemon --memory MEMORY` on a device of its own in `dir`, listening once this
/// returns: the daemon, its socket and its log.
/// A daemon the test started, killed if the test fails before stopping it: else it
/// would live on holding the test's output pipes, and the test run would wait for it.
struct DaemonChild(std::process::Child);

impl std::ops::Deref for DaemonChild {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for DaemonChild {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for DaemonChild {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn start_daemon(dir: &Path, memory: &str) -> (DaemonChild, PathBuf, PathBuf) {
    start_daemon_with(dir, memory, &[])
}

/// `start_daemon` with more of `znswap daemon`'s options.
fn start_daemon_with(dir: &Path, memory: &str, options: &[&str]) -> (DaemonChild, PathBuf, PathBuf) {
    ensure_library();
    let device = device(dir);
    let socket = dir.join("znswap.sock");
    let log = dir.join("daemon.log");
    let mut daemon = Command::new(ZNSWAP)
        .args(["daemon", "--memory", memory, "--device"])
        .arg(&device)
        .arg("--socket")
        .arg(&socket)
        .args(options)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let listening = common::holds_within(Duration::from_secs(20), || {
        assert!(daemon.try_wait().unwrap().is_none(), "the daemon ended: {}", std::fs::read_to_string(&log).unwrap());
        socket.exists()
    });
    assert!(listening, "no socket after 20 s: {}", std::fs::read_to_string(&log).unwrap());
    (DaemonChild(daemon), socket, log)
}

/// `znswap status --json` of the daemon at `socket`.
fn daemon_status(socket: &Path) -> serde_json::Value {
    let output = Command::new(ZNSWAP).args(["status", "--json", "--socket"]).arg(socket).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The pages the daemon at `socket` swapped out of its tenants now, all together.
fn tenants_swapped_out(socket: &Path) -> u64 {
    let status = daemon_status(socket);
    status["tenants"].as_array().unwrap().iter().map(|tenant| tenant["swap_outs"].as_u64().unwrap()).sum()
}

/// `znswap run --memory MEMORY [--stats STATS] --daemon SOCKET`: a program (`--` and
/// its command line to follow) as a tenant of the daemon at `socket`.
fn daemon_tenant(socket: &Path, memory: &str, stats: Option<&Path>) -> Command {
    let mut command = Command::new(ZNSWAP);
    command.args(["run", "--memory", memory]);
    if let Some(stats) = stats {
        command.arg("--stats").arg(stats);
    }
    command.arg("--daemon").arg(socket);
    command
}

/// `znswap daemon` serving two programs at once from one device (`znswap run --daemon`),
/// every byte each one reads checked by the heap checker; a program asking more memory
/// than the daemon has is refused with a message; a fork's children read their parent's
/// heap as at the fork, swapped pages included, and one that executes a command runs it; and `--daemon` with no daemon fails
/// at once saying how to start one. SIGTERM stops the daemon and removes
/// its socket.
#[test]
fn programs_share_one_daemon_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, socket, log) = start_daemon(dir.path(), "48M");
    let served = |args: &[&str], memory: &str, socket: &Path| {
        output_within_limit(daemon_tenant(socket, memory, None).arg("--").arg(HEAP_CHECK).args(args))
    };
    let [heap, dontneed] = std::thread::scope(|scope| {
        let heap = scope.spawn(|| served(&["heap", "64"], "16M", &socket));
        let dontneed = scope.spawn(|| served(&["dontneed", "64"], "16M", &socket));
        [heap.join().unwrap(), dontneed.join().unwrap()]
    });
    for (output, what) in [(&heap, "ok heap 64 MiB"), (&dontneed, "ok dontneed 13 of 64 chunks")] {
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success() && stdout.starts_with(what), "{what}: {stdout}\n{stderr}");
        assert!(stderr.contains("paged by") && stderr.contains("znswap daemon"), "{stderr}");
    }
    let greedy = served(&["heap", "64"], "64M", &socket);
    let stderr = String::from_utf8_lossy(&greedy.stderr);
    assert!(!greedy.status.success() && stderr.contains("ask for less with --memory"), "{stderr}");
    // Each child checks its parent's whole heap as at the fork (swapped pages read from
    // the daemon's snapshot) while the parent rewrites it.
    let fork = served(&["fork", "64"], "16M", &socket);
    let (stdout, stderr) = (String::from_utf8_lossy(&fork.stdout), String::from_utf8_lossy(&fork.stderr));
    assert!(fork.status.success() && stdout.starts_with("ok fork: 2 children checked"), "{stdout}\n{stderr}");
    // A fork's child is paged within the tenant: its own 96 MiB, and the 32 MiB it
    // checks as at the fork, stay within the tenant's 16 MiB (and what is not paged:
    // the arena's bookkeeping, the stacks, the library's tables). (Sized for the test's
    // 256 MiB device, whose zones the fork holds from reset while the child lives.)
    let grow = served(&["fork-grow", "32", "96"], "16M", &socket);
    let (stdout, stderr) = (String::from_utf8_lossy(&grow.stdout), String::from_utf8_lossy(&grow.stderr));
    assert!(grow.status.success() && stdout.starts_with("ok fork-grow"), "{stdout}\n{stderr}");
    let largest: u64 =
        stdout.trim().rsplit(' ').nth(1).and_then(|kib| kib.parse().ok()).expect("the child's resident set");
    assert!(largest < 32 << 10, "the forked child held {largest} KiB anonymous, in 16 MiB: {stdout}\n{stderr}");
    assert!(stderr.contains("2 processes paged (the program and 1 it forked or executed)"), "{stderr}");
    let fork_exec = served(&["fork-exec", "64"], "16M", &socket);
    let (stdout, stderr) = (String::from_utf8_lossy(&fork_exec.stdout), String::from_utf8_lossy(&fork_exec.stderr));
    assert!(fork_exec.status.success() && stdout.starts_with("ok fork-exec"), "{stdout}\n{stderr}");
    let absent = served(&["heap", "64"], "16M", &dir.path().join("none.sock"));
    let stderr = String::from_utf8_lossy(&absent.stderr);
    assert!(!absent.status.success() && stderr.contains("start one with `znswap daemon"), "{stderr}");

    // SAFETY: signalling our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
    assert!(!socket.exists(), "the daemon left its socket behind");
    let log = std::fs::read_to_string(&log).unwrap();
    let opened =
        log.lines().filter(|line| line.contains(" opened by pid ") && line.ends_with(" with 16 MiB of memory"));
    assert_eq!(opened.count(), 5, "{log}");
    // The daemon's own figures: both heaps went to its device and came back, none lost.
    let last_left = log.lines().filter(|line| line.contains(" closed: ")).last().unwrap_or_else(|| panic!("{log}"));
    // "... N pages swapped out, M in, 0 lost"
    let figure = |before: &str| -> u64 {
        let words: Vec<&str> = last_left.split_whitespace().collect();
        let at = words.iter().position(|word| *word == before).unwrap_or_else(|| panic!("{last_left}"));
        words[at - 1].parse().unwrap_or_else(|_| panic!("{last_left}"))
    };
    assert!(figure("pages") > 8192, "the heaps were swapped out: {last_left}");
    assert!(figure("in,") > 4096, "and read back: {last_left}");
    assert!(last_left.ends_with(" 0 lost"), "{last_left}");
}

/// Under `--daemon` a program and every program it executes are one tenant: a shell's
/// two commands each allocate 4x the tenant's memory, each is paged within it (every
/// byte checked by the heap checker), and the summary counts them. `znswap status`
/// shows a tenant while it runs (table, JSON and Prometheus' format) and the daemon's
/// figures after.
#[test]
fn programs_a_program_executes_join_its_tenant_and_status_shows_them() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, socket, log) = start_daemon(dir.path(), "48M");
    let status = |format: &[&str]| {
        let output = Command::new(ZNSWAP).arg("status").arg("--socket").arg(&socket).args(format).output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    // A tenant that waits, seen by `znswap status` while it runs (its sleep is its work).
    let sleeper_said = dir.path().join("sleeper.err");
    let mut sleeper = daemon_tenant(&socket, "16M", None)
        .args(["--tenant", "sleeper", "--", "sleep", "30"])
        .stderr(std::fs::File::create(&sleeper_said).unwrap())
        .spawn()
        .unwrap();
    let mut last = serde_json::Value::Null;
    let seen = common::holds_within(Duration::from_secs(30), || {
        let said = || std::fs::read_to_string(&sleeper_said).unwrap();
        assert!(sleeper.try_wait().unwrap().is_none(), "the sleeper ended early: {}", said());
        last = serde_json::from_str(&status(&["--json"])).unwrap();
        let tenant = last["tenants"].as_array().unwrap().iter().find(|t| t["name"] == "sleeper");
        tenant.is_some_and(|t| t["processes"] == 1)
    });
    let said = std::fs::read_to_string(&sleeper_said).unwrap();
    assert!(seen, "no tenant `sleeper` of 1 process in `znswap status` within 30 s: {last}\nthe sleeper said: {said}");
    let seen = last["tenants"].as_array().unwrap().iter().find(|t| t["name"] == "sleeper").unwrap().clone();
    assert_eq!(seen["budget_bytes"], 16 << 20, "{seen}");
    let table = status(&[]);
    assert!(table.contains("sleeper") && table.contains("16 MiB granted of 48 MiB to 1 tenants"), "{table}");
    let prometheus = status(&["--prometheus"]);
    assert!(prometheus.contains("znswap_tenant_budget_bytes{tenant=\"0\",name=\"sleeper\"} 16777216"), "{prometheus}");

    let stats = dir.path().join("summary.json");
    let command = format!("{HEAP_CHECK} heap 64 && {HEAP_CHECK} heap 48");
    let output = output_within_limit(daemon_tenant(&socket, "16M", Some(&stats)).args(["--", "sh", "-c", &command]));
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("ok heap 64 MiB") && stdout.contains("ok heap 48 MiB"), "{stdout}\n{stderr}");
    assert!(stderr.contains("3 processes paged (the program and 2 it forked or executed)"), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let tenant = &summary["tenant"];
    assert_eq!((tenant["processes"].as_u64(), tenant["executed"].as_u64()), (Some(3), Some(2)), "{summary}");
    // Each command held its heap within the tenant's 16 MiB (and the slack), not its 64.
    let most = tenant["executed_memory_max_bytes"].as_u64().unwrap();
    assert!(most > 8 << 20 && most < 28 << 20, "the largest executed process held {most} B: {summary}");
    assert!(tenant["swap_outs"].as_u64().unwrap() > 16384, "both heaps swapped: {summary}");
    assert!(tenant["swap_ins"].as_u64().unwrap() > 8192, "and read back: {summary}");
    assert!(tenant["faults"].as_u64().unwrap() > 8192, "the daemon timed the tenant's faults: {summary}");
    assert!(tenant["fault_p99_us"].as_f64().unwrap() > 0.0, "{summary}");
    // Where the faults' time went: the device reads are part of it, and no part is more
    // than the whole.
    let part = |name: &str| tenant["fault_seconds"][name].as_f64().unwrap();
    assert!(part("read") > 0.0 && part("read") < part("handled"), "{summary}");
    let parts = ["lock_wait", "read", "install", "room_wait", "other_wait"].map(part);
    assert!(parts.iter().sum::<f64>() <= part("handled") * 1.001, "{summary}");

    // SAFETY: signalling our own children.
    unsafe { libc::kill(sleeper.id() as i32, libc::SIGTERM) };
    sleeper.wait().unwrap();
    // The daemon closes the tenant when it sees the connection end, and says so.
    common::wait_until(Duration::from_secs(30), "the daemon's log saying the sleeper's tenant closed", || {
        std::fs::read_to_string(&log).unwrap().contains("(sleeper) closed: 1 process served")
    });
    let after: serde_json::Value = serde_json::from_str(&status(&["--json"])).unwrap();
    let swapped = after["daemon"]["swap_outs"].as_u64().unwrap();
    assert!(swapped >= tenant["swap_outs"].as_u64().unwrap(), "{after}");
    assert_eq!(after["daemon"]["lost_pages"], 0, "{after}");
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("(sh) closed: 3 processes served"), "{log}");
    assert!(log.contains("(sleeper) closed: 1 process served"), "{log}");
}

/// A tenant's limits on the device hold: with `--write-limit 8M` what its swap-outs and
/// the GC's moves of its pages wrote is within 8 MiB a second of its run (and a burst,
/// and the rounds let through when it was held longest), where unlimited it writes its 40-odd MiB
/// in a second or two; with `--swap-limit 16M` its 48 MiB heap in 8 MiB cannot all go to
/// the device, so it grows past its memory, every byte still right, and the daemon says
/// why.
#[test]
fn a_tenants_write_and_swap_limits_hold() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, socket, log) = start_daemon(dir.path(), "48M");
    let stats = dir.path().join("summary.json");
    let run = |limit: &[&str]| {
        let started = Instant::now();
        let output = output_within_limit(
            daemon_tenant(&socket, "8M", Some(&stats)).args(limit).args(["--", HEAP_CHECK, "heap", "48"]),
        );
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success() && stdout.starts_with("ok heap 48 MiB"), "{stdout}\n{stderr}");
        let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
        (summary, started.elapsed().as_secs_f64(), stderr.into_owned())
    };

    let (summary, seconds, stderr) = run(&["--write-limit", "8M"]);
    let tenant = &summary["tenant"];
    let rate = 8u64 << 20;
    assert_eq!(tenant["write_limit_bytes_per_second"], rate, "{summary}");
    assert!(stderr.contains("write limit") && stderr.contains("8 MiB/s"), "{stderr}");
    let charged = tenant["written_bytes"].as_u64().unwrap() + tenant["gc_bytes"].as_u64().unwrap();
    assert!(charged > 32 << 20, "the heap was written out: {summary}");
    // A burst (100 ms of the rate), a round of appends in flight, the rounds let through.
    let slack = rate / 10 + (2 << 20) + tenant["write_grace_bytes"].as_u64().unwrap();
    assert!(
        charged as f64 <= rate as f64 * seconds + slack as f64,
        "wrote {charged} B in {seconds:.2} s at a limit of {rate} B/s: {summary}"
    );
    assert!(tenant["throttled_seconds"].as_f64().unwrap() > 0.5, "it was held back: {summary}");

    let (summary, _, _) = run(&["--swap-limit", "16M"]);
    assert_eq!(summary["tenant"]["swap_limit_bytes"], 16 << 20, "{summary}");
    let most = summary["report"]["memory_used_max_bytes"].as_u64().unwrap();
    assert!(most > 24 << 20, "its heap grew past its 8 MiB once 16 MiB were on the device: {most} B, {summary}");

    // SAFETY: signalling our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("reached its swap limit (16 MiB on the device)"), "{log}");
    assert!(log.contains(", writing at most 8 MiB/s") && log.contains(", swapping at most 16 MiB"), "{log}");
    assert!(log.lines().filter(|line| line.contains(" closed: ")).all(|line| line.ends_with(" 0 lost")), "{log}");
}

/// A tenant held back by its write limit holds up no other: its faults wait as long as
/// the limit says (here 64 KiB/s: seconds for each batch of its pages), and the daemon's
/// one handler thread serves the other tenant's faults meanwhile (its faults are set
/// aside, not waited in). Waiting in them, the handler served the other tenant only
/// between the held one's waits.
#[test]
fn a_tenant_held_by_its_write_limit_holds_up_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, socket, log) = start_daemon_with(dir.path(), "48M", &["--handler-threads", "1"]);
    let stats = dir.path().join("held.json");
    let mut held = daemon_tenant(&socket, "8M", Some(&stats))
        .args(["--write-limit", "64K", "--", HEAP_CHECK, "heap", "64"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    // Until it has been held back: its heap is past its memory, written out at 64 KiB/s.
    let mut status = serde_json::Value::Null;
    let throttled = common::holds_within(Duration::from_secs(30), || {
        assert!(held.try_wait().unwrap().is_none(), "the limited tenant ended");
        status = daemon_status(&socket);
        status["tenants"].as_array().unwrap().iter().any(|tenant| {
            tenant["write_limit_bytes_per_second"] == 64 << 10 && tenant["throttled_seconds"].as_f64().unwrap() > 1.0
        })
    });
    assert!(throttled, "the limited tenant was not held back in 30 s: {status}");

    let started = Instant::now();
    let other = output_within_limit(daemon_tenant(&socket, "8M", None).args(["--", HEAP_CHECK, "heap", "48"]));
    let seconds = started.elapsed().as_secs_f64();
    let (stdout, stderr) = (String::from_utf8_lossy(&other.stdout), String::from_utf8_lossy(&other.stderr));
    assert!(other.status.success() && stdout.starts_with("ok heap 48 MiB"), "{stdout}\n{stderr}");
    // Alone it takes a second or two here; held up, minutes.
    assert!(seconds < 30.0, "the tenant beside a held one took {seconds:.1} s");
    assert!(held.try_wait().unwrap().is_none(), "the limited tenant was still at work beside it");

    // SAFETY: signalling the process group this test started.
    unsafe { libc::kill(-(held.id() as i32), libc::SIGKILL) };
    held.wait().unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.lines().filter(|line| line.contains(" closed: ")).all(|line| line.ends_with(" 0 lost")), "{log}");
}

/// A tenant stopped (SIGSTOP: a shell's Ctrl-Z, a debugger) holds up no other: the
/// daemon asks its agent to drop pages written out and, with no answer in 2 ms, goes on
/// (the pages wait for the answer) instead of waiting with every tenant's evictions
/// behind it. A second program then runs within its memory while the first is stopped,
/// and the first, continued, finishes with every byte right.
#[test]
fn a_stopped_tenant_holds_up_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, socket, log) = start_daemon(dir.path(), "48M");
    let mut stopped = daemon_tenant(&socket, "8M", None)
        .args(["--", HEAP_CHECK, "heap", "160"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let launcher = stopped.id();
    let program = common::wait_for(Duration::from_secs(20), "the program to start", || {
        common::children(launcher).first().copied()
    });
    // Stopped until its agent has been asked a discard it could not answer: its pages
    // are being written out all along, so a stop lands on one soon. Each try stops it
    // as more of its pages have gone out (their discards follow), waits until every
    // thread of it is stopped (its agent among them), and gives the daemon a while to
    // ask: a discard it asks now goes unanswered, and 2 ms later the log says so. A
    // try that caught none (the discards were answered before the stop) lets it go on.
    let late = |log: &Path| std::fs::read_to_string(log).unwrap().contains("has not answered a discard");
    let all_stopped = || {
        let threads = std::fs::read_dir(format!("/proc/{program}/task")).unwrap();
        threads.filter_map(Result::ok).all(|thread| {
            let tid: u32 = thread.file_name().to_string_lossy().parse().unwrap();
            // (`state` reads /proc/TID/stat, which is the thread's.)
            matches!(common::state(tid), Some('T' | 't'))
        })
    };
    for _ in 0..100 {
        let before = tenants_swapped_out(&socket);
        common::wait_until(Duration::from_secs(60), "more of the program's pages to be swapped out", || {
            assert!(stopped.try_wait().unwrap().is_none(), "the program ended before a stop caught a discard");
            tenants_swapped_out(&socket) > before
        });
        // SAFETY: signalling the program this test started.
        unsafe { libc::kill(program as i32, libc::SIGSTOP) };
        common::wait_until(Duration::from_secs(30), "every thread of the program to stop", all_stopped);
        if common::holds_within(Duration::from_millis(300), || late(&log)) {
            break;
        }
        // SAFETY: as above.
        unsafe { libc::kill(program as i32, libc::SIGCONT) };
    }
    assert!(late(&log), "no stop caught a discard: {}", std::fs::read_to_string(&log).unwrap());

    let stats = dir.path().join("summary.json");
    let other = output_within_limit(daemon_tenant(&socket, "8M", Some(&stats)).args(["--", HEAP_CHECK, "heap", "48"]));
    let (stdout, stderr) = (String::from_utf8_lossy(&other.stdout), String::from_utf8_lossy(&other.stderr));
    assert!(other.status.success() && stdout.starts_with("ok heap 48 MiB"), "{stdout}\n{stderr}");
    // Its pages were evicted as they should be: with the evictor waiting on the stopped
    // agent, its faults would have gone past its memory one after another.
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let most = summary["report"]["memory_used_max_bytes"].as_u64().unwrap();
    assert!(most < 20 << 20, "the program beside a stopped one held {most} B in 8 MiB: {summary}");

    // SAFETY: as above.
    unsafe { libc::kill(program as i32, libc::SIGCONT) };
    let status = stopped.wait().unwrap();
    let mut stdout = String::new();
    stopped.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let mut stderr = String::new();
    stopped.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(status.success() && stdout.starts_with("ok heap 160 MiB"), "{stdout}\n{stderr}");

    // SAFETY: signalling our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.lines().filter(|line| line.contains(" closed: ")).all(|line| line.ends_with(" 0 lost")), "{log}");
}

/// A daemon meets connections that break its protocol: garbage bytes, a `Hello` naming
/// another process's pid, a fork's child with a token of no fork, a tenant asking more
/// memory than the daemon has, connections opened without end. Each is refused (with the
/// reason where one is sent) and logged, and the daemon goes on serving a program.
#[test]
fn a_daemon_refuses_garbage_and_strangers_and_serves_on() {
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    use znswap_wire::{Channel, Hello, Join, Name, Range, Reason, ToDaemon, ToTenant, Token};
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, socket, log) = start_daemon(dir.path(), "32M");
    let refused = |channel: &Channel| match channel.recv_to_tenant() {
        Ok(Some(ToTenant::Refused(reason))) => Some(reason),
        Ok(None) => None,
        other => panic!("answered {other:?}"),
    };
    // Garbage: not a message.
    let channel = Channel::connect(&socket).unwrap();
    channel.send(b"\x07\x00garbage, not a message", &[]).unwrap();
    assert_eq!(refused(&channel), Some(Reason::BadMessage));
    // A Hello naming another process (pid 1), with the descriptors it takes.
    let pipe = || {
        let mut ends = [0; 2];
        // SAFETY: a new pipe of our own.
        assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
        // SAFETY: ours from here on.
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) }
    };
    let (a, b) = pipe();
    let (c, _d) = pipe();
    let hello = Hello {
        pid: 1,
        forked: false,
        uffd_features: 0,
        arena: Range::new(0x7f00_0000_0000, 1 << 30).unwrap(),
        join: Join::New(Name::new("impostor").unwrap()),
        memory_pages: 4096,
    };
    let channel = Channel::connect(&socket).unwrap();
    channel.send_to_daemon(&ToDaemon::Hello(hello), &[a.as_fd(), b.as_fd(), c.as_fd()]).unwrap();
    assert_eq!(refused(&channel), Some(Reason::NotAllowed));
    // A fork's child whose token names no fork.
    let channel = Channel::connect(&socket).unwrap();
    channel.send_to_daemon(&ToDaemon::ForkChild { token: Token([0x5a; 16]) }, &[a.as_fd()]).unwrap();
    assert_eq!(refused(&channel), Some(Reason::UnknownTenant));
    // More memory than the daemon has.
    let channel = Channel::connect(&socket).unwrap();
    let greedy = ToDaemon::Open {
        name: Name::new("greedy").unwrap(),
        memory_pages: 1 << 20,
        write_limit: 0,
        swap_limit_pages: 0,
    };
    channel.send_to_daemon(&greedy, &[]).unwrap();
    assert_eq!(refused(&channel), Some(Reason::NoMemory));
    drop(channel);
    // Connections without end (each a thread of the daemon's): refused past 256 open.
    let idle: Vec<Channel> = (0..256).map(|_| Channel::connect(&socket).unwrap()).collect();
    let one_more = Channel::connect(&socket).unwrap();
    assert_eq!(refused(&one_more), Some(Reason::Full));
    drop(idle);
    // Their threads end as they see them closed: until then a new one may be refused.
    // A connection is served once the daemon answers it what it asks (its figures).
    let served = |channel: &Channel| {
        // (Refused, the daemon may have closed its end already: its answer is there.)
        let _ = channel.send_to_daemon(&ToDaemon::Status, &[]);
        match channel.recv_to_tenant() {
            Ok(Some(ToTenant::Status(_))) => true,
            Ok(Some(ToTenant::Refused(Reason::Full))) => false,
            other => panic!("a status asked on a new connection was answered {other:?}"),
        }
    };
    common::wait_until(Duration::from_secs(10), "a new connection to be served after the others closed", || {
        served(&Channel::connect(&socket).unwrap())
    });

    let output = output_within_limit(daemon_tenant(&socket, "16M", None).args(["--", HEAP_CHECK, "heap", "64"]));
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && stdout.starts_with("ok heap 64 MiB"), "{stdout}\n{stderr}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
    let log = std::fs::read_to_string(&log).unwrap();
    for said in [
        "refused: ",
        "names pid 1, but the connection is from pid",
        "a token of no fork",
        "(NoMemory)",
        "refused: 256 connections are open (1 refused so far)",
    ] {
        assert!(log.contains(said), "the log does not say {said:?}:\n{log}");
    }
}

/// `znswap daemon` killed while a program it pages runs: the program serves its own
/// faults from then on, its first touch of a page the daemon had swapped out raises
/// SIGBUS (never zeros: the heap checker checks every byte, and a wrong one exits 1),
/// and the summary says why.
#[test]
fn a_daemon_killed_under_a_program_leaves_it_sigbus_never_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, socket, log) = start_daemon(dir.path(), "32M");
    let run = std::thread::spawn({
        let socket = socket.clone();
        move || output_within_limit(daemon_tenant(&socket, "16M", None).args(["--", HEAP_CHECK, "heap", "192"]))
    });
    // Once it has swapped (a budget's worth of its pages out; its heap is 12x its budget,
    // to be read back after it is all written).
    let swapped = common::holds_within(Duration::from_secs(60), || {
        assert!(!run.is_finished(), "the program ended before the daemon was killed");
        tenants_swapped_out(&socket) >= 4096
    });
    assert!(swapped, "16 MiB of the program were not swapped out in 60 s: {}", std::fs::read_to_string(&log).unwrap());
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let output = run.join().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!stdout.contains("ok heap"), "it finished before the daemon was killed: make its heap larger\n{stderr}");
    assert_eq!(output.status.code(), Some(128 + libc::SIGBUS), "not ended by SIGBUS:\n{stdout}\n{stderr}");
    assert!(stderr.contains("the pager serving this process is gone"), "{stderr}");
    assert!(stderr.contains("the daemon stopped"), "the summary says why: {stderr}");
}
