//! `znswap run` holds the whole process tree to `--memory` (its default): a program's
//! forked children and the programs it executes are paged with it, every byte they
//! read back checked, and the tree's memory (as a memory cgroup charges it: pages
//! shared copy-on-write counted once) stays within `--memory` and a margin; a process
//! no preload reaches (a statically linked program) is said at once and counted.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const ZNSWAP: &str = env!("CARGO_BIN_EXE_znswap");
const HEAP_CHECK: &str = env!("CARGO_BIN_EXE_znswap-heap-check");
const RUN_LIMIT: Duration = Duration::from_secs(600);
/// What the tree may hold past `--memory`: the launcher's pager tables and buffers and
/// the processes' memory no pager covers (their stacks, what they held before their
/// library started), which the budget makes room for only as it sees them.
const MARGIN_MIB: u64 = 32;

/// A device file of 64 zones of 64 MiB in `dir` (room for the trees' swap).
fn device(dir: &Path) -> PathBuf {
    let path = dir.join("tree.zns");
    let created = Command::new(ZNSWAP)
        .args(["device", "create", "--zones", "64", "--zone-size", "64M", "--device"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    path
}

struct Ran {
    output: Output,
    summary: serde_json::Value,
}

impl Ran {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    /// The tree's memory at its highest, in MiB.
    fn tree_memory_mib(&self) -> u64 {
        self.summary["tree"]["memory_used_max_bytes"].as_u64().unwrap_or_else(|| panic!("no tree: {}", self.summary))
            >> 20
    }
    /// Pages the launcher's pager swapped out and read back, over the tree.
    fn swapped(&self) -> (u64, u64) {
        let tenant = &self.summary["tenant"];
        (tenant["swap_outs"].as_u64().unwrap_or(0), tenant["swap_ins"].as_u64().unwrap_or(0))
    }
    /// Processes paged as the tree.
    fn processes(&self) -> u64 {
        self.summary["tenant"]["processes"].as_u64().unwrap_or(0)
    }
}

/// `znswap run --memory MEMORY -- COMMAND…` (plain: the tree's mode), in `dir`.
fn run(dir: &Path, memory: &str, command: &[&str]) -> Ran {
    common::ensure_built(ZNSWAP, "znswap-preload");
    let stats = dir.join("summary.json");
    let output = common::output_within_limit(
        Command::new(ZNSWAP)
            .args(["run", "--memory", memory, "--device"])
            .arg(device(dir))
            .arg("--stats")
            .arg(&stats)
            .arg("--")
            .args(command)
            .current_dir(dir),
        RUN_LIMIT,
    );
    let summary = std::fs::read(&stats)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(serde_json::Value::Null);
    Ran { output, summary }
}

/// Ran to its end with every byte checked, its tree's pages went to the device and came
/// back, and the tree stayed within `memory_mib` and the margin.
fn assert_held(ran: &Ran, memory_mib: u64, what: &str) {
    assert!(
        ran.output.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        ran.output.status,
        ran.stdout(),
        ran.stderr()
    );
    let (out, in_) = ran.swapped();
    assert!(out > 0 && in_ > 0, "{what}: the tree was not swapped ({out} out, {in_} in): {}", ran.summary);
    let most = ran.tree_memory_mib();
    assert!(
        most <= memory_mib + MARGIN_MIB,
        "{what}: the tree held {most} MiB in --memory {memory_mib}M: {}\n{}",
        ran.summary,
        ran.stderr()
    );
}

/// Python 3, if it is here (CI installs it; the tests fail there without it).
fn python() -> Option<&'static str> {
    let found = ["/usr/bin/python3"].into_iter().find(|path| Path::new(path).is_file());
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "python3 is needed for this test");
        eprintln!("no /usr/bin/python3: skipped");
    }
    found
}

/// The parent forks; the child checks its parent's heap and allocates and checks 200
/// MiB of its own: the child is paged within the tree.
#[test]
fn a_forked_child_that_allocates_is_held_with_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let ran = run(dir.path(), "64M", &[HEAP_CHECK, "fork-grow", "32", "200"]);
    assert!(ran.stdout().starts_with("ok fork-grow"), "{}\n{}", ran.stdout(), ran.stderr());
    assert_held(&ran, 64, "fork-grow 32 200");
    assert!(ran.processes() >= 2, "the child was not paged: {}", ran.summary);
}

/// `sh -c "python3 child.py"`: the shell and the Python it runs, which builds about 300
/// MiB and checks a digest of it, are one tree.
#[test]
fn a_shells_python_is_held_with_the_shell() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("child.py"),
        "import hashlib\n\
         data = [bytes([i % 251]) * 4096 for i in range(300 * 256)]\n\
         h = hashlib.sha256()\n\
         for d in data: h.update(d)\n\
         expected = hashlib.sha256()\n\
         for i in range(300 * 256): expected.update(bytes([i % 251]) * 4096)\n\
         assert h.digest() == expected.digest()\n\
         print('ok child', len(data))\n",
    )
    .unwrap();
    let ran = run(dir.path(), "64M", &["/bin/sh", "-c", &format!("{python} child.py")]);
    assert!(ran.stdout().contains("ok child 76800"), "{}\n{}", ran.stdout(), ran.stderr());
    assert_held(&ran, 64, "sh -c python3");
    assert!(ran.processes() >= 2, "the shell's python was not paged: {}", ran.summary);
}

/// Python's `multiprocessing.Pool(4)` (forked workers), each building and checking 100
/// MiB: every result right, the tree held.
#[test]
fn a_python_pool_of_four_workers_is_held_together() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pool.py"),
        "import hashlib, multiprocessing\n\
         def work(n):\n\
         \x20   blocks = [hashlib.sha256(b'%d-%d' % (n, i)).digest() * 128 for i in range(25600)]\n\
         \x20   total = hashlib.sha256()\n\
         \x20   for b in blocks: total.update(b)\n\
         \x20   return n, len(blocks), total.hexdigest()\n\
         def expect(n):\n\
         \x20   total = hashlib.sha256()\n\
         \x20   for i in range(25600): total.update(hashlib.sha256(b'%d-%d' % (n, i)).digest() * 128)\n\
         \x20   return n, 25600, total.hexdigest()\n\
         if __name__ == '__main__':\n\
         \x20   multiprocessing.set_start_method('fork')\n\
         \x20   with multiprocessing.Pool(4) as pool:\n\
         \x20       got = pool.map(work, range(8))\n\
         \x20   assert got == [expect(n) for n in range(8)], 'a worker returned a wrong result'\n\
         \x20   print('ok pool', len(got))\n",
    )
    .unwrap();
    let ran = run(dir.path(), "64M", &[python, "pool.py"]);
    assert!(ran.stdout().contains("ok pool 8"), "{}\n{}", ran.stdout(), ran.stderr());
    assert_held(&ran, 64, "multiprocessing.Pool(4)");
    assert!(ran.processes() >= 5, "the workers were not paged: {}", ran.summary);
}

/// `make` whose recipes allocate: each recipe's program is paged within the tree.
#[test]
fn make_and_its_allocating_recipes_are_held_together() {
    if !Path::new("/usr/bin/make").is_file() {
        assert!(std::env::var_os("CI").is_none(), "make is needed for this test");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Makefile"),
        format!(
            "all: a b c\n\
             a:\n\t{HEAP_CHECK} heap 96\n\
             b:\n\t{HEAP_CHECK} heap 96\n\
             c:\n\t{HEAP_CHECK} heap 96\n\
             .PHONY: all a b c\n"
        ),
    )
    .unwrap();
    let ran = run(dir.path(), "64M", &["/usr/bin/make", "-s", "-j", "2"]);
    assert_eq!(ran.stdout().matches("ok heap 96 MiB").count(), 3, "{}\n{}", ran.stdout(), ran.stderr());
    assert_held(&ran, 64, "make -j 2");
    assert!(ran.processes() >= 4, "the recipes were not paged: {}", ran.summary);
}

/// A statically linked program executed in the tree: no preload reaches it, which the
/// run says at once; its memory counts, and the summary reports it.
#[test]
fn a_static_program_in_the_tree_is_said_unpaged_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("static.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n\
         int main(void) { size_t n = 24 << 20; char *p = malloc(n); memset(p, 7, n); sleep(2);\n\
         unsigned long s = 0; for (size_t i = 0; i < n; i += 4096) s += p[i];\n\
         printf(\"ok static %lu\\n\", s); return s != (n / 4096) * 7; }\n",
    )
    .unwrap();
    let binary = dir.path().join("static");
    let compiled = Command::new("cc").args(["-static", "-O1", "-o"]).arg(&binary).arg(&source).output();
    match compiled {
        Ok(output) if output.status.success() => {}
        other => {
            assert!(std::env::var_os("CI").is_none(), "cc -static is needed for this test: {other:?}");
            eprintln!("no static linking here: skipped");
            return;
        }
    }
    let binary = binary.to_str().unwrap();
    let ran = run(dir.path(), "64M", &["/bin/sh", "-c", &format!("{HEAP_CHECK} heap 96 && {binary}")]);
    assert!(ran.stdout().contains("ok static"), "{}\n{}", ran.stdout(), ran.stderr());
    assert!(ran.output.status.success(), "{}", ran.stderr());
    assert!(ran.stderr().contains("runs unpaged: it is statically linked"), "not said: {}", ran.stderr());
    let escaped = ran.summary["tree"]["escaped"].as_array().unwrap_or_else(|| panic!("{}", ran.summary));
    let this = escaped.iter().find(|escape| escape["command"].as_str().is_some_and(|c| c.contains("static")));
    let this = this.unwrap_or_else(|| panic!("the static program is not in the summary: {}", ran.summary));
    let held = this["memory_max_bytes"].as_u64().unwrap();
    assert!(held >= 20 << 20, "its 24 MiB were not counted ({held} B): {}", ran.summary);
    assert!(ran.stderr().contains("ran unpaged"), "the summary does not list it: {}", ran.stderr());
}
