//! What the `znswap` command's integration tests share: waits for a condition (a server
//! up, a line in a log, a process in a state), never a sleep of a guessed length.

// Each test file uses what it needs of this module.
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

#[path = "../../../pager/tests/common/wait.rs"]
mod wait;
#[allow(unused_imports)]
pub use wait::{holds_within, wait_for, wait_until};

/// The children of process `pid` (those its main thread started), as the kernel lists
/// them; none if it is gone.
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|pids| pids.split_whitespace().filter_map(|pid| pid.parse().ok()).collect())
        .unwrap_or_default()
}

/// The state letter of process `pid` (`/proc/PID/stat`: R, S, T stopped, Z, ...); None
/// if it is gone.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses, which may hold spaces and parentheses.
    stat[stat.rfind(')')? + 1..].split_whitespace().next()?.chars().next()
}

/// The command name of process `pid` (`/proc/PID/comm`); None if it is gone.
pub fn command_name(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|name| name.trim_end().to_string())
}

/// `command`'s output, as `Command::output` gives it, unless it runs past `limit`: then
/// its process group (the launcher and the program) is killed and the test fails.
pub fn output_within_limit(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|error| panic!("starting {command:?}: {error}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    if !holds_within(limit, || child.try_wait().unwrap().is_some()) {
        // SAFETY: signals the group this test started (its leader is the child).
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
        let stderr = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
        panic!("{command:?} still ran after {limit:?} (killed); stderr:\n{stderr}");
    }
    let status = child.wait().unwrap();
    Output { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

/// The shared libraries the command's tests preload: the pager's, and a test library
/// whose threads start before it.
const LIBRARIES: [&str; 2] = ["znswap-preload", "znswap-early-threads"];

/// The shared library of workspace package `package` (one of [`LIBRARIES`]), next to the
/// binaries (beside `znswap`, the binary at that path). `cargo test -p znswap` builds
/// neither library, and one left from an earlier build may be stale, so the first call
/// in a test binary brings them all up to date in one cargo run. All at once because
/// cargo re-links and re-places a library whenever it builds a package that depends on
/// it with other features (`znswap-early-threads` depends on the pager's library): a
/// build while another test starts a program that preloads it leaves the loader a
/// moment without the file, and the program runs unpaged ("cannot be preloaded:
/// ignored"). Returns its path.
pub fn ensure_built(znswap: &str, package: &str) -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    assert!(LIBRARIES.contains(&package), "{package} is not among the test libraries {LIBRARIES:?}");
    let dir = Path::new(znswap).parent().unwrap();
    let path_of = |package: &str| dir.join(format!("lib{}.so", package.replace('-', "_")));
    BUILT.call_once(|| {
        let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        build.args(["build", "--quiet"]);
        for package in LIBRARIES {
            build.args(["-p", package]);
        }
        if dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build.status().unwrap_or_else(|error| panic!("running cargo to build {LIBRARIES:?}: {error}"));
        assert!(status.success(), "building {LIBRARIES:?} failed");
    });
    let path = path_of(package);
    assert!(path.is_file(), "cargo built {package} but {} is missing", path.display());
    path
}
