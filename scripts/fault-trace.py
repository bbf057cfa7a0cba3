#!/usr/bin/env python3
"""Where a running program's thread waits: page faults by kind, and everything else.

Records the scheduler's switches and wake-ups and user page faults machine-wide with
`perf` for a moment (`--seconds`), then, for the thread of PID that faults most, splits
the time it spent off the CPU into
  - missing: blocked after a fault on a page not mapped (error code 0x4 read, 0x6 write):
    a swap-in, under znswap or under the kernel's swap;
  - write-protect: blocked after a write to a mapped page (0x7): znswap's write-protect
    faults (reference sampling, swap-cached pages, swap-outs under way);
  - other: off the CPU with no fault before it (waiting for a client, a lock, a timer),
and prints count, mean, p50/p90/p99 in µs and the share of the wall time for each, with
how long the thread waited runnable before it ran again. Also samples, every 10 ms,
which CPU the thread and the threads of `--peer PID` (a client, say) run on, and each
CPU's idle share from /proc/stat: a client that shares the server's CPU answers it with
a context switch, one on another virtual CPU that halted waits for that CPU's wake-up.

Usage (root, while the program is busy; `perf` from linux-perf):
    scripts/fault-trace.py --pid $(pgrep -x redis-server) [--peer $(pgrep -f 'znswap kv')]
        [--seconds 0.5] [--json]
A fault's time runs from the fault to the thread's return to the CPU, so it includes
the kernel's own work in the fault (its swap-in and reclaim). On some virtual CPUs (the
ones it was written on) perf misses the events a CPU emits from its idle task (the switch back to the
thread, a wake-up from an interrupt), so a thread that waits with its CPU idle, as under
the kernel's swap, shows fewer waits than it had: the script compares the waits it saw
with the major faults the kernel counted and warns when they fall short. znswap's fault
handlers keep the CPU busy while they serve a fault, so its side is seen whole.
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

EVENTS = "sched:sched_switch,sched:sched_wakeup,exceptions:page_fault_user"
LINE = re.compile(r"\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)")
# A fault whose thread leaves the CPU later than this after it is not what it waits on.
FAULT_TO_SLEEP_MAX_US = 5000


def die(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def cpu_times():
    times = {}
    with open("/proc/stat") as stat:
        for line in stat:
            parts = line.split()
            if re.fullmatch(r"cpu\d+", parts[0]):
                values = [int(v) for v in parts[1:]]
                times[parts[0]] = (sum(values), values[3] + values[4])
    return times


def thread_cpu(tid):
    try:
        with open(f"/proc/{tid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return None


def tids(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def sample_placement(thread, peer, stop, out):
    """Every 10 ms: (thread's CPU, [peer threads' CPUs])."""
    while not stop.is_set():
        mine = thread_cpu(thread)
        theirs = [c for c in (thread_cpu(t) for t in tids(peer)) if c is not None] if peer else []
        if mine is not None:
            out.append((mine, theirs))
        time.sleep(0.01)


def fault_counts(pid, tid):
    """The thread's (minor, major) faults so far."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return int(fields[7]), int(fields[9])
    except (OSError, IndexError, ValueError):
        return 0, 0


def busiest_thread(pid):
    """The thread of pid with the most page faults so far (minor + major)."""
    return max(tids(pid), key=lambda tid: sum(fault_counts(pid, tid)), default=pid)


def summarize(durations, wall_us):
    if not durations:
        return {"count": 0}
    durations.sort()
    pick = lambda q: durations[min(len(durations) - 1, int(len(durations) * q))]
    return {
        "count": len(durations),
        "mean_us": round(statistics.mean(durations), 1),
        "p50_us": round(pick(0.5), 1),
        "p90_us": round(pick(0.9), 1),
        "p99_us": round(pick(0.99), 1),
        "share": round(sum(durations) / wall_us, 3),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pid", type=int, required=True, help="the program (its most faulting thread is traced)")
    parser.add_argument("--peer", type=int, help="a process whose CPUs are compared with the thread's (a client)")
    parser.add_argument("--seconds", type=float, default=0.5, help="how long to record [default: 0.5]")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if os.geteuid() != 0:
        die("needs root (perf records the scheduler's tracepoints machine-wide); run it with sudo")
    if not os.path.isdir(f"/proc/{args.pid}"):
        die(f"no process {args.pid}")
    if not 0 < args.seconds <= 10:
        die("--seconds takes a value above 0 and at most 10 (a second records a few hundred thousand events)")
    if subprocess.run(["sh", "-c", "command -v perf"], capture_output=True).returncode != 0:
        die("needs perf (apt-get install linux-perf)")
    if not os.path.exists("/sys/kernel/tracing/events"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], capture_output=True)
    thread = busiest_thread(args.pid)
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "perf.data")
        placement, stop = [], threading.Event()
        sampler = threading.Thread(target=sample_placement, args=(thread, args.peer, stop, placement))
        before = cpu_times()
        faults_before, counted_since = fault_counts(args.pid, thread), time.monotonic()
        sampler.start()
        record = subprocess.run(
            ["perf", "record", "-a", "-m", "4096", "-q", "-o", data, "-e", EVENTS, "--", "sleep", str(args.seconds)],
            capture_output=True, text=True)
        stop.set()
        sampler.join()
        after = cpu_times()
        faults_after, counted_for = fault_counts(args.pid, thread), time.monotonic() - counted_since
        if record.returncode != 0:
            die(f"perf record failed: {record.stderr.strip()}")
        script = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True)
        if script.returncode != 0:
            die(f"perf script failed: {script.stderr.strip()}")
        lost = re.findall(r"lost (\d+) chunks", record.stderr + script.stderr, re.IGNORECASE)

    kinds = collections.defaultdict(list)
    run_delays = []
    first = last = None
    pending = None  # (time, error code) of the thread's last fault
    blocked = None  # (since, kind)
    woken_at = None
    for line in script.stdout.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        _comm, tid, _cpu, stamp, event, rest = match.groups()
        tid, now = int(tid), float(stamp) * 1e6
        first = now if first is None else first
        last = now
        if event == "exceptions:page_fault_user" and tid == thread:
            code = re.search(r"error_code=(\S+)", rest)
            pending = (now, code.group(1) if code else "?")
        elif event == "sched:sched_switch" and f"prev_pid={thread} " in rest:
            state = re.search(r"prev_state=(\S+)", rest)
            if state and state.group(1) in ("S", "D"):
                if pending and now - pending[0] < FAULT_TO_SLEEP_MAX_US:
                    code = pending[1]
                    kind = {"0x4": "missing", "0x6": "missing", "0x7": "write-protect"}.get(code, f"fault {code}")
                    blocked = (pending[0], kind)
                else:
                    blocked = (now, "other")
            pending = None
        elif event == "sched:sched_wakeup" and re.search(rf"\bpid={thread}\b", rest) and blocked:
            woken_at = now
        elif event == "sched:sched_switch" and f"next_pid={thread} " in rest and blocked:
            kinds[blocked[1]].append(now - blocked[0])
            if woken_at is not None and woken_at >= blocked[0]:
                run_delays.append(now - woken_at)
            blocked, woken_at = None, None
    if first is None or last <= first:
        die("perf recorded no events (is the program running?)")
    wall_us = last - first
    idle = {cpu: round((after[cpu][1] - before[cpu][1]) / max(1, after[cpu][0] - before[cpu][0]), 3)
            for cpu in sorted(after)}
    same = [mine in theirs for mine, theirs in placement if theirs]
    report = {
        "pid": args.pid,
        "thread": thread,
        "seconds": round(wall_us / 1e6, 3),
        "blocked": {kind: summarize(values, wall_us) for kind, values in sorted(kinds.items())},
        "runnable_after_wakeup": summarize(run_delays, wall_us),
        "cpu_idle": idle,
        "thread_cpus": dict(collections.Counter(f"cpu{mine}" for mine, _ in placement)),
        "peer_shares_cpu": round(sum(same) / len(same), 3) if same else None,
        "events_lost": sum(int(n) for n in lost),
        # The kernel's own counts over the recording, to check the trace against: a
        # userfault is a minor fault, a swap-in that read the device a major one.
        "minor_faults": faults_after[0] - faults_before[0],
        "major_faults": faults_after[1] - faults_before[1],
    }
    # Events a CPU emits while its idle task runs (the switch back to the thread, the
    # wake-up from an interrupt) may be missing from the record (seen on this machine's
    # virtual CPUs): a thread that waits on a read with its CPU idle, as under the
    # kernel's swap, then shows fewer waits than it had. Say so when the kernel counted
    # many more major faults than the trace shows waits after one.
    expected = report["major_faults"] * (wall_us / 1e6) / max(counted_for, 1e-3)
    seen = report["blocked"].get("missing", {}).get("count", 0)
    report["major_faults_seen_share"] = round(seen / expected, 2) if expected >= 100 else None
    if args.json:
        print(json.dumps(report))
        return
    print(f"thread {thread} of {args.pid}, {report['seconds']} s recorded")
    print(f"{'off the CPU':16} {'count':>7} {'mean µs':>8} {'p50':>7} {'p90':>7} {'p99':>8} {'of wall':>8}")
    rows = list(report["blocked"].items()) + [("runnable, woken", report["runnable_after_wakeup"])]
    for kind, row in rows:
        if row["count"]:
            print(f"{kind:16} {row['count']:7} {row['mean_us']:8} {row['p50_us']:7} {row['p90_us']:7} "
                  f"{row['p99_us']:8} {row['share'] * 100:7.1f}%")
    print(f"the kernel counted {report['minor_faults']} minor and {report['major_faults']} major faults of the thread")
    print("CPU idle: " + ", ".join(f"{cpu} {share * 100:.0f}%" for cpu, share in idle.items())
          + "; the thread ran on " + ", ".join(f"{cpu} {n}x" for cpu, n in sorted(report["thread_cpus"].items())))
    if report["peer_shares_cpu"] is not None:
        print(f"peer {args.peer} on the thread's CPU in {report['peer_shares_cpu'] * 100:.0f} % of samples")
    if report["major_faults_seen_share"] is not None and report["major_faults_seen_share"] < 0.7:
        print(f"warning: the trace shows waits after {seen} faults where the kernel counted about {expected:.0f} "
              "major ones: switches from an idle CPU went unrecorded, so the waits above are short of what the "
              "thread waited; compare the kernel's swap by its counters (scripts/kv-compare.sh)", file=sys.stderr)
    if report["events_lost"]:
        print(f"warning: perf lost {report['events_lost']} events; record for less time", file=sys.stderr)


if __name__ == "__main__":
    main()
