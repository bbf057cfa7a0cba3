//! A library `crates/cli/tests/run.rs` preloads behind `znswap run`'s own: the loader
//! runs its constructor before the pager's (LD_PRELOAD objects are initialised last to
//! first), so the threads it starts exist before the pager does, as threads started by
//! a program's libraries at load can. They allocate across the pager's start-up (the
//! first chunks in ordinary memory, the later ones in the paged heap), grow an early
//! chunk with realloc, free early chunks after start-up, and check every byte when the
//! program asks (`znswap_early_threads_join`).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::thread::JoinHandle;

use znswap_workload::pattern;

const MIB: usize = 1 << 20;
/// Per thread: more than the test's budget of 16 MiB between the two.
const CHUNKS: usize = 24;
const THREADS: usize = 2;

static STARTED_BEFORE_PAGER: AtomicBool = AtomicBool::new(false);
static THREADS_RUNNING: Mutex<Vec<JoinHandle<Result<usize, String>>>> = Mutex::new(Vec::new());

/// A chunk's content: `znswap_workload::pattern`'s, with the thread's chunks as pages.
fn page(thread: usize, chunk: usize) -> u64 {
    (thread * CHUNKS + chunk) as u64
}

fn filled(thread: usize, chunk: usize, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    pattern::fill(&mut bytes, page(thread, chunk), 1);
    bytes
}

fn check(bytes: &[u8], thread: usize, chunk: usize) -> Result<(), String> {
    match pattern::first_wrong_byte(bytes, page(thread, chunk), 1) {
        Some(offset) => {
            Err(format!("thread {thread} chunk {chunk} offset {offset}: wrong byte {:#04x}", bytes[offset]))
        }
        None => Ok(()),
    }
}

/// Allocates a chunk every few milliseconds (so some land before the pager starts and
/// most after), then grows the first one, frees every third, and checks the rest.
fn work(thread: usize) -> Result<usize, String> {
    let mut chunks: Vec<Option<Vec<u8>>> = Vec::new();
    for chunk in 0..CHUNKS {
        chunks.push(Some(filled(thread, chunk, MIB)));
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // An early chunk grown after start-up: realloc moves it into the paged heap.
    let first = chunks[0].as_mut().expect("not freed yet");
    first.extend_from_slice(&filled(thread, 0, 4 * MIB)[MIB..]);
    for chunk in (1..CHUNKS).step_by(3) {
        chunks[chunk] = None;
    }
    let mut checked = 0;
    for (chunk, bytes) in chunks.iter().enumerate() {
        if let Some(bytes) = bytes {
            check(bytes, thread, chunk)?;
            checked += 1;
        }
    }
    Ok(checked)
}

extern "C" fn start() {
    // Still set: the pager's library removes its configuration when it starts (the
    // name is `znswap_pager::run_env::CONFIG`; this test library links nothing of ours).
    STARTED_BEFORE_PAGER.store(std::env::var_os("ZNSWAP_RUN_CONFIG").is_some(), Relaxed);
    let mut running = THREADS_RUNNING.lock().unwrap();
    for thread in 0..THREADS {
        running.push(std::thread::spawn(move || work(thread)));
    }
}

#[used]
#[link_section = ".init_array"]
static START: extern "C" fn() = start;

/// Joins the threads: the chunks they checked, or -1 (with a message on stderr) if a
/// byte was wrong, a thread failed, or they did not start before the pager.
#[no_mangle]
pub extern "C" fn znswap_early_threads_join() -> i64 {
    if !STARTED_BEFORE_PAGER.load(Relaxed) {
        eprintln!("the early threads started after the pager (or without it)");
        return -1;
    }
    let handles: Vec<_> = std::mem::take(&mut *THREADS_RUNNING.lock().unwrap());
    let mut checked = 0;
    for handle in handles {
        match handle.join() {
            Ok(Ok(chunks)) => checked += chunks as i64,
            Ok(Err(error)) => {
                eprintln!("{error}");
                return -1;
            }
            Err(_) => {
                eprintln!("an early thread panicked");
                return -1;
            }
        }
    }
    checked
}
