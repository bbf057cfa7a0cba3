"""The sides a program is compared on, shared by scripts/run-compare.py and scripts/suite.py.

- kernel: the program in a child memory cgroup (v2, or v1's memory controller) limited to
  the memory, the kernel's own swap on a swap file beside znswap's device (or on a loop
  device over a file in /dev/shm, to see the software path alone), zswap off;
- zswap: the same with zswap on (its compressor as the kernel was built with);
- znswap: `znswap run --memory M --device D --stats F -- PROGRAM`.

A run measures what a user would: wall time, the CPU time of the program (with the
pager's threads under znswap, and direct reclaim under the kernel: `wait4`'s rusage), the
whole machine's busy CPU time (kswapd and the pager's daemon included), the pages swapped
in, major faults, the peak memory, and a SHA-256 of the program's standard output.
"""

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDES = ("kernel", "zswap", "znswap")
ZSWAP_ENABLED = "/sys/module/zswap/parameters/enabled"


def size(text):
    """Bytes in a size such as 64M, 1G or 4096."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)


def vmstat():
    """The machine's /proc/vmstat counters."""
    values = {}
    with open("/proc/vmstat") as stat:
        for line in stat:
            key, value = line.split()
            values[key] = int(value)
    return values


def busy_cpu_seconds():
    """CPU seconds the whole machine has spent not idle (every CPU, since boot)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def znswap_binary(given=None):
    """The znswap binary: `given`, else a release build of this repository (built now)."""
    if given:
        return given
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "znswap", "-p", "znswap-preload"],
                   cwd=REPO, check=True)
    return os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "release", "znswap")


class Cgroup:
    """A child memory cgroup limited to `limit` bytes (v2, or v1's memory controller)."""

    def __init__(self, limit, tag="compare"):
        own = open("/proc/self/cgroup").read().splitlines()
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            parent = "/sys/fs/cgroup" + next(line.split(":", 2)[2] for line in own if line.startswith("0::"))
            self.v2 = True
        else:
            path = next(line.split(":", 2)[2] for line in own if line.split(":")[1] == "memory")
            parent = "/sys/fs/cgroup/memory" + path
            self.v2 = False
        self.path = os.path.join(parent, f"znswap-{tag}-{os.getpid()}-{time.monotonic_ns()}")
        os.mkdir(self.path)
        self.write("memory.max" if self.v2 else "memory.limit_in_bytes", str(limit))

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def read(self, name):
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return None

    def peak_bytes(self):
        value = self.read("memory.peak") or self.read("memory.max_usage_in_bytes")
        return int(value) if value else None

    def stat(self, key):
        for line in (self.read("memory.stat") or "").splitlines():
            name, value = line.split()
            if name == key:
                return int(value)
        return None

    def oom_kills(self):
        """OOM kills in the cgroup (v2's memory.events, v1's memory.oom_control)."""
        for name in ("memory.events", "memory.oom_control"):
            for line in (self.read(name) or "").splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return None

    def wrap(self, argv):
        """argv, started inside this cgroup."""
        return ["sh", "-c", 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"', "sh", self.path] + argv

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


class KernelSwap:
    """The kernel's swap for the kernel and zswap sides: a swap file in `directory`, or with
    `ram` a loop device over a file in /dev/shm. On only while a run uses it."""

    def __init__(self, directory, swap_bytes, ram=False):
        self.loop = None
        if ram:
            self.file = f"/dev/shm/znswap-compare-{os.getpid()}.swap"
            subprocess.run(["truncate", "-s", str(swap_bytes), self.file], check=True)
            self.loop = subprocess.run(["losetup", "--find", "--show", self.file], check=True,
                                       capture_output=True, text=True).stdout.strip()
            self.target = self.loop
        else:
            self.file = os.path.join(directory, f"compare-{os.getpid()}.swap")
            subprocess.run(["fallocate", "-l", str(swap_bytes), self.file], check=True)
            self.target = self.file
        os.chmod(self.file, 0o600)
        subprocess.run(["mkswap", "-q", self.target], check=True, stdout=subprocess.DEVNULL)

    @contextlib.contextmanager
    def on(self, zswap):
        previous = open(ZSWAP_ENABLED).read().strip() if os.path.exists(ZSWAP_ENABLED) else None
        if zswap and previous is None:
            raise SystemExit(f"error: the zswap side needs {ZSWAP_ENABLED} (a kernel built with CONFIG_ZSWAP)")
        if previous is not None:
            with open(ZSWAP_ENABLED, "w") as f:
                f.write("Y" if zswap else "N")
        subprocess.run(["swapon", self.target], check=True)
        try:
            yield
        finally:
            subprocess.run(["swapoff", self.target])
            if previous is not None:
                with open(ZSWAP_ENABLED, "w") as f:
                    f.write(previous)

    def remove(self):
        subprocess.run(["swapoff", self.target], stderr=subprocess.DEVNULL)
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop])
        if os.path.exists(self.file):
            os.unlink(self.file)


def create_device(znswap, device, budget):
    """znswap's device file, created anew: room for 8x the memory and 4 GiB more."""
    zones = max(16, (8 * budget + 4 * (1 << 30)) // (62 << 20))
    subprocess.run([znswap, "device", "create", "--device", device, "--zones", str(zones),
                    "--zone-size", "64M", "--zone-capacity", "62M", "--force"], check=True, stdout=subprocess.DEVNULL)


def znswap_argv(znswap, memory, device, stats, extra, command):
    return [znswap, "run", "--memory", memory, "--device", device, "--stats", stats] + list(extra) + ["--"] + command


def znswap_report(stats):
    """`znswap run --stats`'s report, or {} if there is none (the run was killed)."""
    try:
        with open(stats) as f:
            return json.load(f).get("report") or {}
    except (OSError, ValueError):
        return {}


class Counters:
    """The machine's counters at a run's start; `since()` gives what the run added."""

    def __init__(self):
        self.started = time.monotonic()
        self.busy = busy_cpu_seconds()
        self.vm = vmstat()

    def since(self):
        vm = vmstat()
        return {"seconds": time.monotonic() - self.started,
                "machine_cpu_seconds": busy_cpu_seconds() - self.busy,
                "pswpin": vm.get("pswpin", 0) - self.vm.get("pswpin", 0),
                "pswpout": vm.get("pswpout", 0) - self.vm.get("pswpout", 0),
                "zswpin": vm.get("zswpin", 0) - self.vm.get("zswpin", 0),
                "zswpout": vm.get("zswpout", 0) - self.vm.get("zswpout", 0)}


def usage_figures(usage):
    return {"cpu_seconds": usage.ru_utime + usage.ru_stime, "peak_rss_bytes": usage.ru_maxrss * 1024,
            "major_faults": usage.ru_majflt}


def run_command(argv, timeout=None):
    """Runs argv to its end, its stdout hashed. Returns the figures of the run: seconds,
    status (negative: killed by that signal), the rusage figures, the machine's counters,
    stdout_sha256 and stderr_tail."""
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    counters = Counters()
    child = subprocess.Popen(argv, stdout=out, stderr=err, start_new_session=True)
    deadline = time.monotonic() + timeout if timeout else None
    try:
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if deadline and time.monotonic() > deadline:
                os.killpg(child.pid, signal.SIGKILL)
                deadline = None
            time.sleep(0.02)
    except BaseException:
        # Stopped (Ctrl-C, SIGTERM): the program, in a session of its own, goes too, so
        # that its cgroup, device and swap can be taken down.
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise
    row = counters.since()
    row["status"] = os.waitstatus_to_exitcode(status)
    row.update(usage_figures(usage))
    out.seek(0)
    digest = hashlib.sha256()
    for block in iter(lambda: out.read(1 << 20), b""):
        digest.update(block)
    row["stdout_sha256"] = digest.hexdigest()
    err.seek(0)
    row["stderr_tail"] = err.read().decode(errors="replace")[-3000:]
    return row


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, child, seconds=120):
    """Waits until something accepts connections on `port`; False if `child` exits first or
    the time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if child.poll() is not None:
            return False
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


def run_server(server_argv, client_argv, port, timeout=None):
    """Starts server_argv, waits until it listens on `port`, runs client_argv (which prints
    one JSON object) to its end, then stops the server. Returns the run's figures: the
    client's JSON as `client`, its status, and the server's rusage figures."""
    log = tempfile.TemporaryFile()
    counters = Counters()
    server = subprocess.Popen(server_argv, stdout=log, stderr=log, start_new_session=True)
    row = {}
    try:
        if not wait_for_port(port, server):
            row["status"] = "server did not start"
        else:
            client = subprocess.run(client_argv, capture_output=True, text=True, timeout=timeout)
            row["status"] = client.returncode
            row["stderr_tail"] = client.stderr[-3000:]
            try:
                row["client"] = json.loads(client.stdout)
            except ValueError:
                row["client"] = None
    finally:
        row.update(counters.since())
        # The whole session: under znswap the server is the child of `znswap run`,
        # which ends with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while True:
            pid, status, usage = os.wait4(server.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.pid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.05)
        row.update(usage_figures(usage))
        log.seek(0)
        row["server_log_tail"] = log.read().decode(errors="replace")[-2000:]
    return row
