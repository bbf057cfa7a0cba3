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

const MIB: usize = 1 << 20;
/// Per thread: more than the test's budget of 16 MiB between the two.
const CHUNKS: usize = 24;
const THREADS: usize = 2;

static STARTED_BEFORE_PAGER: AtomicBool = AtomicBool::new(false);
static THREADS_RUNNING: Mutex<Vec<JoinHandle<Result<usize, String>>>> = Mutex::new(Vec::new());

fn expected(thread: usize, chunk: usize, offset: usize) -> u8 {
    let x = (thread as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (chunk as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ (offset as u64 / 8).wrapping_mul(0x94D0_49BB_1331_11EB);
    let x = x ^ (x >> 31);
    (x >> ((offset % 8) * 8)) as u8 | 1
}

fn filled(thread: usize, chunk: usize, len: usize) -> Vec<u8> {
    (0..len).map(|offset| expected(thread, chunk, offset)).collect()
}

fn check(bytes: &[u8], thread: usize, chunk: usize) -> Result<(), String> {
    match (0..bytes.len()).find(|&offset| bytes[offset] != expected(thread, chunk, offset)) {
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
    // Still set: the pager's library removes its configuration when it starts.
    STARTED_BEFORE_PAGER.store(std::env::var_os("ZNSWAP_RUN_DEVICE").is_some(), Relaxed);
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
