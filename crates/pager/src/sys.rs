//! The few plain system calls the pager's parts share: anonymous mappings as paged
//! memory wants them, CPU clocks, and random keys.

/// A private anonymous mapping of `len` bytes as paged memory wants it: no swap
/// reservation, no transparent huge pages (they would fault and swap 2 MiB at a time).
pub fn map_anonymous(len: usize) -> std::io::Result<*mut u8> {
    // SAFETY: a fresh private anonymous mapping, checked below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: advice on our own fresh mapping.
    unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) };
    Ok(base.cast())
}

/// CPU time of the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process (its exited threads' included), in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_clock_ns(clock: libc::clockid_t) -> u64 {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec we own.
    unsafe { libc::clock_gettime(clock, &mut time) };
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

/// A key from the OS's random source.
pub(crate) fn random_key() -> u64 {
    let mut key = [0u8; 8];
    // SAFETY: an 8-byte buffer, written by the call.
    let got = unsafe { libc::getrandom(key.as_mut_ptr().cast(), key.len(), 0) };
    assert_eq!(got, 8, "getrandom: {}", std::io::Error::last_os_error());
    u64::from_ne_bytes(key)
}

/// The calling thread's id.
pub(crate) fn gettid() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::gettid() as u32 }
}

/// The machine's idle time so far, summed over its CPUs (`/proc/stat`'s idle and iowait:
/// a CPU waiting for I/O runs nothing), in nanoseconds; `None` where it cannot be read.
pub(crate) fn machine_idle_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let mut fields = stat.lines().next()?.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields.take(5).map(|field| field.parse().ok()).collect::<Option<_>>()?;
    let idle = ticks.get(3)? + ticks.get(4)?;
    // SAFETY: no arguments.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| idle * (1_000_000_000 / hz as u64))
}
