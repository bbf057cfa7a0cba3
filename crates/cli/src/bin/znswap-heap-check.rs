//! `znswap-heap-check`: a program that uses its heap the ways real programs do and
//! checks every byte it reads back; run it under `znswap run` to check the pager with
//! an unmodified program (the tests of `znswap run` do). Prints `ok ...` and exits 0
//! when every check passed; a wrong byte ends it with exit status 1 and where it was.
//!
//! Its heap is plain `malloc` (Rust's system allocator), so under `znswap run` all of
//! it is paged.

use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;

use znswap_workload::pattern;

const MIB: usize = 1 << 20;

/// Chunk `index` at `version` (`znswap_workload::pattern`: every word differs from its
/// neighbours and from other versions, so a page read back from the wrong place, the
/// wrong time or as zeros is caught).
fn fill(chunk: &mut [u8], index: usize, version: u64) {
    pattern::fill(chunk, index as u64, version);
}

/// Chunk `index`'s content at `version`, `len` bytes of it.
fn content(index: usize, version: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    pattern::fill(&mut bytes, index as u64, version);
    bytes
}

fn check(chunk: &[u8], index: usize, version: u64, what: &str) {
    if let Some(offset) = pattern::first_wrong_byte(chunk, index as u64, version) {
        let expected = content(index, version, chunk.len());
        eprintln!(
            "wrong byte in {what}: chunk {index} offset {offset}: {:#04x}, expected {:#04x} (version {version})",
            chunk[offset], expected[offset]
        );
        std::process::exit(1);
    }
}

/// `mib` MiB in 1 MiB chunks, written twice and checked after each pass.
fn heap(mib: usize) -> String {
    let mut chunks: Vec<Vec<u8>> = (0..mib).map(|_| vec![0u8; MIB]).collect();
    for version in 1..=2 {
        for (index, chunk) in chunks.iter_mut().enumerate() {
            fill(chunk, index, version);
        }
        for (index, chunk) in chunks.iter().enumerate() {
            check(chunk, index, version, "the heap");
        }
    }
    format!("heap {mib} MiB")
}

/// Chunk `index` at `version` with each 4 KiB page's last three quarters zero: pages
/// that compress (about 4x), each still its own (the first quarter is the pattern).
fn fill_compressible(chunk: &mut [u8], index: usize, version: u64) {
    pattern::fill(chunk, index as u64, version);
    for page in chunk.chunks_mut(4096) {
        page[1024..].fill(0);
    }
}

/// `heap`, with pages that compress: written twice and checked after each pass.
fn compressible(mib: usize) -> String {
    let mut chunks: Vec<Vec<u8>> = (0..mib).map(|_| vec![0u8; MIB]).collect();
    let mut expected = vec![0u8; MIB];
    for version in 1..=2 {
        for (index, chunk) in chunks.iter_mut().enumerate() {
            fill_compressible(chunk, index, version);
        }
        for (index, chunk) in chunks.iter().enumerate() {
            fill_compressible(&mut expected, index, version);
            if let Some(offset) = chunk.iter().zip(&expected).position(|(got, want)| got != want) {
                eprintln!(
                    "wrong byte in the compressible heap: chunk {index} offset {offset}: {:#04x}, expected {:#04x} \
                     (version {version})",
                    chunk[offset], expected[offset]
                );
                std::process::exit(1);
            }
        }
    }
    format!("compressible {mib} MiB")
}

/// The kernel reads and writes heap pages that are on the device: `write()` from them,
/// `read()` into them, `send()`/`recv()` through a socket pair.
fn io(mib: usize) -> String {
    let mut chunks: Vec<Vec<u8>> = (0..mib)
        .map(|index| {
            let mut chunk = vec![0u8; MIB];
            fill(&mut chunk, index, 1);
            chunk
        })
        .collect();
    let path = std::env::temp_dir().join(format!("znswap-heap-check-{}", std::process::id()));
    // The first chunks were written longest ago: under a budget of a quarter of the
    // heap they are on the device now.
    let mut file = std::fs::File::create(&path).expect("temp file");
    for chunk in &chunks[..4] {
        file.write_all(chunk).expect("write() from heap pages");
    }
    drop(file);
    let mut file = std::fs::File::open(&path).expect("temp file");
    for index in 4..8 {
        file.read_exact(&mut chunks[index]).expect("read() into heap pages");
        check(&chunks[index], index - 4, 1, "read() data");
    }
    std::fs::remove_file(&path).ok();
    let (a, b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let sender = std::thread::spawn({
        let sent: Vec<u8> = chunks[8].clone();
        move || {
            let mut a = a;
            a.write_all(&sent).expect("send");
        }
    });
    let (head, tail) = chunks.split_at_mut(9);
    let target = &mut tail[0];
    let mut received = 0;
    while received < MIB {
        // SAFETY: recv into our own buffer's unfilled tail.
        let n = unsafe { libc::recv(b.as_raw_fd(), target[received..].as_mut_ptr().cast(), MIB - received, 0) };
        assert!(n > 0, "recv: {}", std::io::Error::last_os_error());
        received += n as usize;
    }
    sender.join().unwrap();
    check(target, 8, 1, "recv() data");
    check(&head[8], 8, 1, "the sent chunk");
    for (index, chunk) in chunks.iter().enumerate().skip(10) {
        check(chunk, index, 1, "the heap after I/O");
    }
    format!("io {mib} MiB")
}

/// Threads, each with its own chunks and all reading the shared ones.
fn threads(mib: usize, count: usize) -> String {
    let shared: std::sync::Arc<Vec<Vec<u8>>> = std::sync::Arc::new(
        (0..mib / 2)
            .map(|index| {
                let mut chunk = vec![0u8; MIB];
                fill(&mut chunk, index, 7);
                chunk
            })
            .collect(),
    );
    let per_thread = (mib / 2 / count).max(1);
    let handles: Vec<_> = (0..count)
        .map(|thread| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let base = 1000 * (thread + 1);
                let mut own: Vec<Vec<u8>> = (0..per_thread).map(|_| vec![0u8; MIB]).collect();
                for round in 1..=3u64 {
                    for (index, chunk) in own.iter_mut().enumerate() {
                        fill(chunk, base + index, round);
                    }
                    for (index, chunk) in shared.iter().enumerate().skip(thread % 3).step_by(3) {
                        check(chunk, index, 7, "shared chunks");
                    }
                    for (index, chunk) in own.iter().enumerate() {
                        check(chunk, base + index, round, "a thread's chunks");
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("a thread failed its checks");
    }
    format!("threads {count} x {per_thread} MiB + {} MiB shared", mib / 2)
}

/// One buffer grown by realloc (Vec's doubling) to `mib` MiB, checked as it moves.
fn realloc(mib: usize) -> String {
    let mut buffer: Vec<u8> = Vec::new();
    let step = 64 << 10;
    let mut index = 0;
    while buffer.len() < mib * MIB {
        let mut piece = vec![0u8; step];
        fill(&mut piece, index, 3);
        buffer.extend_from_slice(&piece);
        index += 1;
    }
    for (index, piece) in buffer.chunks(step).enumerate() {
        check(piece, index, 3, "the grown buffer");
    }
    format!("realloc to {mib} MiB")
}

/// Runs a program with exec and checks it runs without the pager: no library mapped,
/// no configuration in its environment.
fn exec() -> String {
    let output = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg("grep -c libznswap_preload /proc/self/maps; env | grep -c -e ZNSWAP_RUN -e libznswap_preload")
        .output()
        .expect("running /bin/sh");
    let text = String::from_utf8_lossy(&output.stdout);
    let counts: Vec<&str> = text.lines().collect();
    if counts != ["0", "0"] {
        eprintln!("an exec'd child still has the pager: maps/environment matches {counts:?}");
        std::process::exit(1);
    }
    "exec without the pager".into()
}

/// Whether this process may have transparent huge pages (`THP_enabled` in its status).
fn thp() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("reading /proc/self/status");
    let enabled = status.lines().find_map(|line| line.strip_prefix("THP_enabled:")).map(str::trim);
    format!("thp {}", if enabled == Some("0") { "off" } else { "on" })
}

/// Page-aligned chunks, so `madvise` can name whole pages of them.
fn aligned_chunks(mib: usize, version: u64) -> Vec<Box<[u8]>> {
    (0..mib)
        .map(|index| {
            let layout = std::alloc::Layout::from_size_align(MIB, 4096).unwrap();
            // SAFETY: a non-zero size; the box takes ownership with the same layout
            // (the global allocator is malloc's, which Box frees with free()).
            let mut chunk = unsafe {
                let block = std::alloc::alloc_zeroed(layout);
                assert!(!block.is_null());
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(block, MIB))
            };
            fill(&mut chunk, index, version);
            chunk
        })
        .collect()
}

/// `mib` MiB in 1 MiB blocks from `posix_memalign` with `align_kib` KiB alignment,
/// written twice and checked after each pass: a large alignment is still heap.
fn aligned(mib: usize, align_kib: usize) -> String {
    let blocks: Vec<&mut [u8]> = (0..mib)
        .map(|_| {
            let mut block = std::ptr::null_mut();
            // SAFETY: writes one pointer into `block`; the block is ours, never freed.
            let rc = unsafe { libc::posix_memalign(&mut block, align_kib << 10, MIB) };
            assert_eq!(rc, 0, "posix_memalign({} KiB, 1 MiB): {rc}", align_kib);
            assert_eq!(block as usize % (align_kib << 10), 0, "misaligned");
            // SAFETY: a fresh 1 MiB block of our own.
            unsafe { std::slice::from_raw_parts_mut(block.cast::<u8>(), MIB) }
        })
        .collect();
    let mut blocks = blocks;
    for version in 1..=2 {
        for (index, block) in blocks.iter_mut().enumerate() {
            fill(block, index, version);
        }
        for (index, block) in blocks.iter().enumerate() {
            check(block, index, version, "aligned blocks");
        }
    }
    // What programs do with them next: ask their size, grow one, free half.
    for block in &blocks {
        // SAFETY: a live block of ours.
        let usable = unsafe { libc::malloc_usable_size(block.as_ptr() as *mut libc::c_void) };
        assert!(usable >= MIB, "malloc_usable_size of an aligned block: {usable}");
    }
    // SAFETY: a live block of ours, given to realloc and not used after.
    let grown = unsafe { libc::realloc(blocks[0].as_mut_ptr().cast(), 2 * MIB) };
    assert!(!grown.is_null(), "realloc of an aligned block");
    // SAFETY: realloc's block of 2 MiB, ours.
    let grown = unsafe { std::slice::from_raw_parts_mut(grown.cast::<u8>(), 2 * MIB) };
    check(&grown[..MIB], 0, 2, "an aligned block grown by realloc");
    for block in blocks.iter_mut().skip(1).step_by(2) {
        // SAFETY: a live block of ours, not used after.
        unsafe { libc::free(block.as_mut_ptr().cast()) };
    }
    for (index, block) in blocks.iter().enumerate().skip(2).step_by(2) {
        check(block, index, 2, "aligned blocks kept after the frees");
    }
    format!("aligned {mib} MiB at {align_kib} KiB")
}

/// `madvise(MADV_DONTNEED)` (and `MADV_FREE`) on parts of the heap, some of them on the
/// device by then: they read back zero, the rest is intact, and they take new data.
fn dontneed(mib: usize) -> String {
    let mut chunks = aligned_chunks(mib, 1);
    let discarded: Vec<usize> = (0..mib).step_by(5).collect();
    for (n, &index) in discarded.iter().enumerate() {
        let advice = if n % 2 == 0 { libc::MADV_DONTNEED } else { libc::MADV_FREE };
        // The middle half of the chunk.
        let range = &mut chunks[index][MIB / 4..3 * MIB / 4];
        // SAFETY: whole pages of our own allocation.
        let rc = unsafe { libc::madvise(range.as_mut_ptr().cast(), range.len(), advice) };
        assert_eq!(rc, 0, "madvise: {}", std::io::Error::last_os_error());
    }
    for (index, chunk) in chunks.iter().enumerate() {
        if discarded.contains(&index) {
            if let Some(offset) = (MIB / 4..3 * MIB / 4).find(|&offset| chunk[offset] != 0) {
                eprintln!("chunk {index} offset {offset}: {:#04x} after a discard, expected zero", chunk[offset]);
                std::process::exit(1);
            }
            check(&chunk[..MIB / 4], index, 1, "the kept head of a discarded chunk");
            // (the tail's offsets start at 3/4: compare against the full chunk's pattern)
            let expected = content(index, 1, MIB);
            if let Some(offset) = (3 * MIB / 4..MIB).find(|&offset| chunk[offset] != expected[offset]) {
                eprintln!("chunk {index} offset {offset}: the kept tail of a discarded chunk changed");
                std::process::exit(1);
            }
        } else {
            check(chunk, index, 1, "chunks not discarded");
        }
    }
    for (index, chunk) in chunks.iter_mut().enumerate() {
        fill(chunk, index, 2);
    }
    for (index, chunk) in chunks.iter().enumerate() {
        check(chunk, index, 2, "the heap rewritten after the discards");
    }
    format!("dontneed {} of {mib} chunks", discarded.len())
}

/// Forks twice; each child checks the whole heap as it was at its fork while the
/// parent rewrites it (pages on the device included), and exits 0 only if every byte
/// matched.
fn fork_snapshot(mib: usize) -> String {
    // A locale loaded from its files, as Python's start-up does: glibc keeps its data
    // in the heap, paged out by the time of the fork, and reads it in every thread's
    // start, the child's fault thread's too (which once waited there for itself).
    // SAFETY: no other thread runs yet; the name is a NUL-terminated literal.
    let locale = unsafe { libc::setlocale(libc::LC_CTYPE, c"C.UTF-8".as_ptr()) };
    if locale.is_null() {
        eprintln!("(no C.UTF-8 locale here: the fork runs in the C locale)");
    }
    let mut chunks = aligned_chunks(mib, 1);
    for round in 1..=2u64 {
        // SAFETY: the child only reads memory and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            for (index, chunk) in chunks.iter().enumerate() {
                check(chunk, index, round, "the forked child's snapshot");
            }
            // SAFETY: ends the child without the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        for (index, chunk) in chunks.iter_mut().enumerate() {
            fill(chunk, index, round + 1);
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            eprintln!("the child of fork {round} failed its checks (status {status:#x})");
            std::process::exit(1);
        }
        for (index, chunk) in chunks.iter().enumerate() {
            check(chunk, index, round + 1, "the parent's heap after the fork");
        }
    }
    format!("fork: 2 children checked {mib} MiB snapshots")
}

/// A heap of `mib` MiB, then a fork whose child checks the heap as at the fork (while
/// the parent rewrites it), then allocates `child_mib` MiB of its own, writes and checks
/// it twice, and says the largest anonymous resident set it saw (`RssAnon`, sampled
/// after each MiB): under a pager that pages the child, bounded by the budget, not by
/// what it allocated.
fn fork_grow(mib: usize, child_mib: usize) -> String {
    let mut chunks = aligned_chunks(mib, 1);
    let mut pipe = [0; 2];
    // SAFETY: a two-descriptor array of ours.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0, "pipe: {}", std::io::Error::last_os_error());
    // SAFETY: the child reads and allocates memory, writes to its pipe and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let mut largest = rss_anon_kib();
        for (index, chunk) in chunks.iter().enumerate() {
            check(chunk, index, 1, "the forked child's snapshot");
            largest = largest.max(rss_anon_kib());
        }
        let mut own = Vec::with_capacity(child_mib);
        for index in 0..child_mib {
            own.push(aligned_chunks(1, 10 + index as u64).pop().expect("a chunk"));
            largest = largest.max(rss_anon_kib());
        }
        for version in [10, 30] {
            for (index, chunk) in own.iter_mut().enumerate() {
                check(chunk, 0, version + index as u64, "the forked child's own memory");
                fill(chunk, 0, version + 20 + index as u64);
                largest = largest.max(rss_anon_kib());
            }
        }
        let said = largest.to_string();
        // SAFETY: writes our own bytes to our pipe, then ends the child without the
        // parent's exit handlers.
        unsafe {
            libc::write(pipe[1], said.as_ptr().cast(), said.len());
            libc::_exit(0)
        };
    }
    // SAFETY: the write end is the child's.
    unsafe { libc::close(pipe[1]) };
    for (index, chunk) in chunks.iter_mut().enumerate() {
        fill(chunk, index, 2);
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        eprintln!("the forked child failed its checks (status {status:#x})");
        std::process::exit(1);
    }
    let mut said = [0u8; 32];
    // SAFETY: reads into our buffer from our pipe.
    let read = unsafe { libc::read(pipe[0], said.as_mut_ptr().cast(), said.len()) };
    let largest: u64 =
        std::str::from_utf8(&said[..read.max(0) as usize]).ok().and_then(|text| text.parse().ok()).unwrap_or(0);
    for (index, chunk) in chunks.iter().enumerate() {
        check(chunk, index, 2, "the parent's heap after the fork");
    }
    format!("fork-grow: the child checked {mib} MiB as at the fork and {child_mib} MiB of its own; its anonymous resident set at most {largest} KiB")
}

/// This process's anonymous resident memory (`RssAnon` of `/proc/self/status`), KiB.
fn rss_anon_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("RssAnon:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A heap of `mib` MiB, then `fork` and `exec` of `/bin/sh -c 'exit 7'` in the child, as
/// a shell or make runs its commands (the child touches nothing of the heap), twice;
/// then the heap is checked.
fn fork_exec(mib: usize) -> String {
    let chunks = aligned_chunks(mib, 1);
    for round in 1..=2 {
        // SAFETY: the child only calls async-signal-safe functions before its exec.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let argv = [c"/bin/sh".as_ptr(), c"-c".as_ptr(), c"exit 7".as_ptr(), std::ptr::null()];
            // SAFETY: NUL-terminated strings and a null-terminated vector, alive here.
            unsafe { libc::execv(argv[0], argv.as_ptr()) };
            // SAFETY: the exec failed: end the child at once.
            unsafe { libc::_exit(127) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7) {
            eprintln!("the command of fork {round} did not run (status {status:#x})");
            std::process::exit(1);
        }
    }
    for (index, chunk) in chunks.iter().enumerate() {
        check(chunk, index, 1, "the heap after the forks");
    }
    format!("fork-exec: 2 commands run beside {mib} MiB")
}

/// An anonymous private mapping of `len` bytes, as a program makes one itself.
fn map_anonymous(len: usize) -> *mut u8 {
    // SAFETY: a fresh mapping of our own.
    let block = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(block, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
    block.cast()
}

/// The bytes of a mapping (it lives until this program unmaps it).
fn bytes<'a>(start: *mut u8, len: usize) -> &'a mut [u8] {
    // SAFETY: mapped read-write by this program, `len` bytes.
    unsafe { std::slice::from_raw_parts_mut(start, len) }
}

fn check_zero(bytes: &[u8], what: &str) {
    if let Some(offset) = bytes.iter().position(|&byte| byte != 0) {
        eprintln!("{what}: offset {offset} is {:#04x}, expected zero", bytes[offset]);
        std::process::exit(1);
    }
}

/// Mappings the program makes itself, `mib` MiB in all in 8 MiB mappings: written and
/// checked; then unmapped whole and in part (head, tail, middle: the rest intact),
/// grown by `mremap` (moved, the new tail zero), shrunk, grown
/// in place (refused or done), covered by `MAP_FIXED` memory (zero there), made partly
/// read-only and read-execute while swapped out and in (no access refused), and new
/// mappings made in the space freed read zero. Every byte is checked at the end.
fn mappings(mib: usize) -> String {
    const LEN: usize = 8 * MIB;
    const PAGE: usize = 4096;
    let protect_range = |start: *mut u8, len: usize, prot: i32| {
        // SAFETY: a range of our own mapping.
        unsafe { libc::mprotect(start.cast(), len, prot) }
    };
    // First, in memory the heap never used: a mapping with a read-only stretch never
    // written. Touches before it map the untouched pages after them at once
    // (`ZERO_FILL_AROUND_PAGES`), across the protection boundaries.
    let fresh_protected = map_anonymous(MIB);
    assert_eq!(protect_range(fresh_protected.wrapping_add(3 * PAGE), 7 * PAGE, libc::PROT_READ), 0);
    check_zero(bytes(fresh_protected, MIB), "a fresh mapping with a read-only stretch");
    assert_eq!(protect_range(fresh_protected, MIB, libc::PROT_READ | libc::PROT_WRITE), 0);
    fill(bytes(fresh_protected, MIB), 200, 1);
    check(bytes(fresh_protected, MIB), 200, 1, "a fresh mapping written after mprotect");
    // SAFETY: our own mapping.
    unsafe { assert_eq!(libc::munmap(fresh_protected.cast(), MIB), 0) };
    let count = (mib / 8).max(10);
    let mut maps: Vec<(*mut u8, usize)> = (0..count).map(|_| (map_anonymous(LEN), LEN)).collect();
    for (index, &(start, len)) in maps.iter().enumerate() {
        check_zero(bytes(start, len), "a fresh mapping");
        fill(bytes(start, len), index, 1);
    }
    for (index, &(start, len)) in maps.iter().enumerate() {
        check(bytes(start, len), index, 1, "the mappings");
    }
    // Mapping 0: unmapped whole. 1: its head. 2: its tail. 3: the middle.
    // SAFETY (each munmap/mremap/mmap below): ranges of our own mappings, which this
    // function no longer touches but as the checks say.
    unsafe {
        assert_eq!(libc::munmap(maps[0].0.cast(), LEN), 0, "munmap: {}", std::io::Error::last_os_error());
        assert_eq!(libc::munmap(maps[1].0.cast(), MIB), 0);
        assert_eq!(libc::munmap(maps[2].0.add(LEN - MIB).cast(), MIB), 0);
        assert_eq!(libc::munmap(maps[3].0.add(3 * MIB).cast(), 2 * MIB), 0);
    }
    let whole = |start: *mut u8, index: usize, from: usize, to: usize, version: u64| {
        let all = bytes(start, LEN);
        let expected = content(index, version, LEN);
        if let Some(offset) = (from..to).find(|&offset| all[offset] != expected[offset]) {
            eprintln!("mapping {index} offset {offset}: changed by an unmap of another part");
            std::process::exit(1);
        }
    };
    whole(maps[1].0, 1, MIB, LEN, 1);
    whole(maps[2].0, 2, 0, LEN - MIB, 1);
    whole(maps[3].0, 3, 0, 3 * MIB, 1);
    whole(maps[3].0, 3, 5 * MIB, LEN, 1);
    // Mapping 4: grown to twice its size (moved).
    let grown = unsafe { libc::mremap(maps[4].0.cast(), LEN, 2 * LEN, libc::MREMAP_MAYMOVE) };
    assert_ne!(grown, libc::MAP_FAILED, "mremap: {}", std::io::Error::last_os_error());
    maps[4] = (grown.cast(), 2 * LEN);
    check(&bytes(maps[4].0, LEN)[..], 4, 1, "a mapping grown by mremap");
    check_zero(&bytes(maps[4].0, 2 * LEN)[LEN..], "the new tail of a grown mapping");
    fill(bytes(maps[4].0, 2 * LEN), 4, 2);
    // Mapping 5: shrunk to half.
    let shrunk = unsafe { libc::mremap(maps[5].0.cast(), LEN, LEN / 2, 0) };
    assert_eq!(shrunk.cast(), maps[5].0, "mremap shrink: {}", std::io::Error::last_os_error());
    maps[5].1 = LEN / 2;
    check(bytes(maps[5].0, LEN / 2), 5, 1, "a mapping shrunk by mremap");
    // Mapping 6: grown without moving: done in place, or refused with ENOMEM.
    let in_place = unsafe { libc::mremap(maps[6].0.cast(), LEN, 2 * LEN, 0) };
    if in_place == libc::MAP_FAILED {
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::ENOMEM));
    } else {
        assert_eq!(in_place.cast(), maps[6].0);
        check_zero(&bytes(maps[6].0, 2 * LEN)[LEN..], "the new tail of a mapping grown in place");
        maps[6].1 = 2 * LEN;
    }
    check(&bytes(maps[6].0, LEN)[..], 6, 1, "a mapping after mremap in place");
    // Mapping 7: fresh memory placed over its middle with MAP_FIXED reads zero.
    let fixed = unsafe {
        libc::mmap(
            maps[7].0.add(2 * MIB).cast(),
            MIB,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    assert_eq!(fixed.cast(), maps[7].0.wrapping_add(2 * MIB), "mmap MAP_FIXED: {}", std::io::Error::last_os_error());
    check_zero(&bytes(maps[7].0, LEN)[2 * MIB..3 * MIB], "MAP_FIXED memory");
    whole(maps[7].0, 7, 0, 2 * MIB, 1);
    whole(maps[7].0, 7, 3 * MIB, LEN, 1);
    // Mapping 8: read-only, then read-execute parts (what a JIT does to its code), swapped
    // out and in meanwhile; no access is refused (the pager must read pages to swap them
    // out); then read-write again and rewritten.
    // Boundaries off any power-of-two run of pages.
    let read_only = protect_range(maps[8].0.wrapping_add(MIB + 5 * PAGE), 2 * MIB - 3 * PAGE, libc::PROT_READ);
    assert_eq!(read_only, 0, "mprotect read-only");
    let rx = libc::PROT_READ | libc::PROT_EXEC;
    assert_eq!(protect_range(maps[8].0.wrapping_add(4 * MIB + 7 * PAGE), MIB + PAGE, rx), 0, "mprotect read-execute");
    let refused = protect_range(maps[8].0.wrapping_add(6 * MIB), MIB, libc::PROT_NONE);
    if refused == 0 {
        eprintln!("mprotect(PROT_NONE) of paged memory was let through");
        std::process::exit(1);
    }
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EACCES));
    for (index, &(start, len)) in maps.iter().enumerate().skip(9) {
        check(bytes(start, len.min(LEN)), index, 1, "the mappings after mprotect (evicting mapping 8)");
    }
    check(bytes(maps[8].0, LEN), 8, 1, "a mapping made partly read-only and read-execute");
    // Growing it by a move would drop its protections: refused.
    // SAFETY: our own mapping; on failure nothing changes.
    let moved = unsafe { libc::mremap(maps[8].0.cast(), LEN, 2 * LEN, libc::MREMAP_MAYMOVE) };
    assert_eq!(moved, libc::MAP_FAILED, "mremap of a mapping with changed protections was let through");
    // A read-only mapping unmapped as it is, and the memory mapped again: zero, writable.
    let read_only = map_anonymous(MIB);
    fill(bytes(read_only, MIB), 300, 1);
    assert_eq!(protect_range(read_only, MIB, libc::PROT_READ), 0);
    // SAFETY: our own mapping.
    unsafe { assert_eq!(libc::munmap(read_only.cast(), MIB), 0) };
    let again = map_anonymous(MIB);
    check_zero(bytes(again, MIB), "a mapping made after a read-only one was unmapped");
    fill(bytes(again, MIB), 301, 1);
    check(bytes(again, MIB), 301, 1, "a mapping made after a read-only one was unmapped");
    // SAFETY: our own mapping.
    unsafe { assert_eq!(libc::munmap(again.cast(), MIB), 0) };
    assert_eq!(protect_range(maps[8].0, LEN, libc::PROT_READ | libc::PROT_WRITE), 0, "mprotect read-write");
    fill(bytes(maps[8].0, LEN), 8, 2);
    // New mappings in the space freed: zero, then written.
    let fresh: Vec<*mut u8> = (0..4).map(|_| map_anonymous(LEN)).collect();
    for (n, &start) in fresh.iter().enumerate() {
        check_zero(bytes(start, LEN), "a mapping made after others were unmapped");
        fill(bytes(start, LEN), 100 + n, 3);
    }
    // Every byte once more, after all of that went through the device.
    check(bytes(maps[4].0, 2 * LEN), 4, 2, "the grown mapping rewritten");
    check(bytes(maps[5].0, LEN / 2), 5, 1, "the shrunk mapping");
    check(bytes(maps[8].0, LEN), 8, 2, "the mapping rewritten after mprotect");
    for (index, &(start, _)) in maps.iter().enumerate().skip(9) {
        check(bytes(start, LEN), index, 1, "the mappings left alone");
    }
    for (n, &start) in fresh.iter().enumerate() {
        check(bytes(start, LEN), 100 + n, 3, "the new mappings");
    }
    for &(start, len) in &maps[1..] {
        // SAFETY: our own mappings, unmapped whole (parts of them already were).
        unsafe { assert_eq!(libc::munmap(start.cast(), len), 0, "munmap at the end") };
    }
    format!("mmap {} MiB: unmap, mremap, MAP_FIXED, mprotect", count * 8)
}

/// Joins the threads the test library `libznswap_early_threads.so` (preloaded behind
/// the pager's) started before the pager did: they allocated across its start-up and
/// check every byte.
fn early_threads() -> String {
    // SAFETY: looks a symbol up in the loaded objects.
    let join = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"znswap_early_threads_join".as_ptr()) };
    if join.is_null() {
        eprintln!("no early threads: preload libznswap_early_threads.so (LD_PRELOAD) to run this check");
        std::process::exit(2);
    }
    // SAFETY: the library's `extern "C" fn() -> i64`.
    let join: extern "C" fn() -> i64 = unsafe { std::mem::transmute(join) };
    let checked = join();
    if checked < 0 {
        std::process::exit(1);
    }
    format!("early threads checked {checked} chunks")
}

/// Forks; the parent exits at once, the child lingers (what a daemon does).
/// Forks a child that outlives this process by `seconds` (a daemon's shape).
fn daemonize(seconds: u64) -> String {
    // SAFETY: fork in a single-threaded moment of this program; the child only sleeps.
    match unsafe { libc::fork() } {
        0 => {
            std::thread::sleep(std::time::Duration::from_secs(seconds));
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(0) }
        }
        pid if pid > 0 => "forked a daemon".into(),
        _ => panic!("fork: {}", std::io::Error::last_os_error()),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |index: usize, default: usize| -> usize {
        args.get(index).map(|text| text.parse().expect("a number")).unwrap_or(default)
    };
    let done = match args.first().map(String::as_str) {
        Some("heap") => heap(number(1, 64)),
        Some("compressible") => compressible(number(1, 64)),
        Some("io") => io(number(1, 64).max(16)),
        Some("threads") => threads(number(1, 64), number(2, 4)),
        Some("realloc") => realloc(number(1, 64)),
        Some("exec") => exec(),
        Some("thp") => thp(),
        Some("dontneed") => dontneed(number(1, 64)),
        Some("mmap") => mappings(number(1, 64)),
        Some("early-threads") => early_threads(),
        Some("fork") => fork_snapshot(number(1, 64)),
        Some("fork-exec") => fork_exec(number(1, 64)),
        Some("fork-grow") => fork_grow(number(1, 64), number(2, 200)),
        Some("daemonize") => daemonize(number(1, 60) as u64),
        Some("aligned") => aligned(number(1, 64), number(2, 256)),
        Some("exit-fast") => {
            // The heap, then `_exit(3)`: no exit handlers run (as Python's `os._exit`).
            println!("ok {}", heap(number(1, 64)));
            std::io::stdout().flush().expect("stdout");
            // SAFETY: ends the process; nothing is left to run.
            unsafe { libc::_exit(3) };
        }
        _ => {
            eprintln!("usage: znswap-heap-check heap|compressible|io|threads|early-threads|realloc|dontneed|mmap|fork|fork-exec|fork-grow|exec|thp|daemonize|exit-fast|aligned [MIB] [THREADS|ALIGN_KIB]");
            std::process::exit(2);
        }
    };
    println!("ok {done}");
}
