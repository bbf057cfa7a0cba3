#!/usr/bin/env python3
"""Any command on the kernel's own swap and under `znswap run`, with the same memory.

(A) kernel: the command in a child memory cgroup (v2 or v1) whose limit is --memory, with
    a swap file on the file system that holds znswap's device.
(B) znswap: `znswap run --memory M --device D --stats F -- CMD`.

A round runs both, the side going first alternating from round to round (a disk may
move 2x within minutes). Each run records the wall time, the peak resident set of the
command (and its descendants: `wait4`'s ru_maxrss), major faults, pages swapped in, and a
SHA-256 of the command's standard output, which must be the same on both sides. Prints a
table, the per-round ratios kernel time / znswap time (above 1: znswap is faster) and
their median, and the whole as JSON on the last line. Needs root; leaves no swap or
cgroup behind.

    sudo scripts/run-compare.py --memory 64M --rounds 3 -- python3 big.py
    sudo scripts/run-compare.py --memory 64M -- sort -S 200M /tmp/big.txt
"""

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)


def vmstat_swap():
    values = {}
    with open("/proc/vmstat") as stat:
        for line in stat:
            key, value = line.split()
            values[key] = int(value)
    return values.get("pswpin", 0), values.get("pswpout", 0)


class Cgroup:
    """A child memory cgroup limited to `limit` bytes (v2, or v1's memory controller)."""

    def __init__(self, limit):
        own = open("/proc/self/cgroup").read().splitlines()
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            parent = "/sys/fs/cgroup" + next(line.split(":", 2)[2] for line in own if line.startswith("0::"))
            self.v2 = True
        else:
            path = next(line.split(":", 2)[2] for line in own if line.split(":")[1] == "memory")
            parent = "/sys/fs/cgroup/memory" + path
            self.v2 = False
        self.path = os.path.join(parent, f"znswap-run-compare-{os.getpid()}")
        os.mkdir(self.path)
        limit_file = "memory.max" if self.v2 else "memory.limit_in_bytes"
        with open(os.path.join(self.path, limit_file), "w") as f:
            f.write(str(limit))

    def read(self, name):
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return None

    def peak_bytes(self):
        value = self.read("memory.peak") or self.read("memory.max_usage_in_bytes")
        return int(value) if value else None

    def major_faults(self):
        for line in (self.read("memory.stat") or "").splitlines():
            key, value = line.split()
            if key == "pgmajfault":
                return int(value)
        return None

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def run_once(argv, cgroup=None):
    """Runs argv, its stdout hashed; returns (seconds, status, rusage, sha256, stderr tail)."""
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    if cgroup:
        argv = ["sh", "-c", 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"', "sh", cgroup.path] + argv
    started = time.monotonic()
    child = subprocess.Popen(argv, stdout=out, stderr=err)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.monotonic() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    digest = hashlib.sha256()
    for block in iter(lambda: out.read(1 << 20), b""):
        digest.update(block)
    err.seek(0)
    tail = err.read().decode(errors="replace")[-4000:]
    return seconds, child.returncode, usage, digest.hexdigest(), tail


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--memory", required=True, help="memory for both sides, e.g. 64M")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--znswap", help="the znswap binary [default: a release build of this repository]")
    parser.add_argument("--device", help="znswap's device file, created anew each round "
                        "[default: $ZNSWAP_DEVICE, else ~/.cache/znswap/run-compare.zns, removed at the end]")
    parser.add_argument("--swap-size", default="8G", help="the kernel side's swap file [default: 8G]")
    parser.add_argument("--znswap-args", default="", help="more flags for `znswap run`, e.g. '--readahead 8'")
    parser.add_argument("--only", choices=["kernel", "znswap"])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    if os.geteuid() != 0:
        sys.exit("error: needs root (swapon, memory cgroups); run it with sudo")
    budget = size(args.memory)
    znswap = args.znswap
    if not znswap:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "znswap", "-p", "znswap-preload"], cwd=REPO, check=True)
        znswap = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "release", "znswap")
    device = args.device or os.environ.get("ZNSWAP_DEVICE")
    device_ours = device is None
    if device_ours:
        device = os.path.expanduser("~/.cache/znswap/run-compare.zns")
    os.makedirs(os.path.dirname(device), exist_ok=True)
    swapfile = os.path.join(os.path.dirname(device), "run-compare.swap")
    sides = [args.only] if args.only else ["kernel", "znswap"]
    results = []
    try:
        if "kernel" in sides:
            subprocess.run(["fallocate", "-l", str(size(args.swap_size)), swapfile], check=True)
            os.chmod(swapfile, 0o600)
            subprocess.run(["mkswap", "-q", swapfile], check=True, stdout=subprocess.DEVNULL)
        for round_ in range(1, args.rounds + 1):
            order = sides if round_ % 2 else list(reversed(sides))
            for side in order:
                subprocess.run(["sync"])
                with open("/proc/sys/vm/drop_caches", "w") as f:
                    f.write("3")
                print(f"== round {round_} of {args.rounds}: {side}", file=sys.stderr)
                row = {"round": round_, "side": side}
                swap_before = vmstat_swap()
                if side == "kernel":
                    subprocess.run(["swapon", swapfile], check=True)
                    cgroup = Cgroup(budget)
                    try:
                        seconds, status, usage, digest, tail = run_once(command, cgroup)
                        row["cgroup_peak_bytes"] = cgroup.peak_bytes()
                        row["major_faults"] = cgroup.major_faults()
                    finally:
                        subprocess.run(["swapoff", swapfile])
                        cgroup.remove()
                    swap_after = vmstat_swap()
                    row["swapped_in_pages"] = swap_after[0] - swap_before[0]
                    row["swapped_out_pages"] = swap_after[1] - swap_before[1]
                else:
                    zones = max(16, (8 * budget + 4 * (1 << 30)) // (62 << 20))
                    subprocess.run([znswap, "device", "create", "--device", device, "--zones", str(zones),
                                    "--zone-size", "64M", "--zone-capacity", "62M", "--force"],
                                   check=True, stdout=subprocess.DEVNULL)
                    stats = tempfile.NamedTemporaryFile(suffix=".json", delete=False)
                    stats.close()
                    argv = [znswap, "run", "--memory", args.memory, "--device", device, "--stats", stats.name]
                    argv += args.znswap_args.split() + ["--"] + command
                    seconds, status, usage, digest, tail = run_once(argv)
                    try:
                        report = json.load(open(stats.name)).get("report") or {}
                    except ValueError:
                        report = {}
                    os.unlink(stats.name)
                    pager = report.get("pager") or {}
                    row["swapped_in_pages"] = pager.get("swap_in_reads")
                    row["swapped_out_pages"] = pager.get("swap_outs_written")
                    row["missing_faults"] = pager.get("missing_faults")
                    row["write_protect_faults"] = pager.get("write_protect_faults")
                    row["major_faults"] = usage.ru_majflt
                row.update({"seconds": seconds, "status": status, "peak_rss_bytes": usage.ru_maxrss * 1024,
                            "cpu_seconds": usage.ru_utime + usage.ru_stime, "stdout_sha256": digest})
                if status != 0:
                    print(f"== {side} round {round_}: exit status {status}; its stderr ends:\n{tail}", file=sys.stderr)
                results.append(row)
    finally:
        if "kernel" in sides:
            subprocess.run(["swapoff", swapfile], stderr=subprocess.DEVNULL)
            if os.path.exists(swapfile):
                os.unlink(swapfile)
        if device_ours and os.path.exists(device):
            os.unlink(device)

    def get(round_, side):
        return next((row for row in results if row["round"] == round_ and row["side"] == side), None)

    ratios, unrated = [], []
    lines = [["round", "side", "seconds", "peak RSS MiB", "CPU s", "major faults", "pages in", "status"]]
    for round_ in range(1, args.rounds + 1):
        for side in sides:
            row = get(round_, side)
            lines.append([str(round_), side, f"{row['seconds']:.2f}", f"{row['peak_rss_bytes'] / (1 << 20):.0f}",
                          f"{row['cpu_seconds']:.1f}", str(row.get("major_faults")), str(row.get("swapped_in_pages")),
                          str(row["status"])])
        kernel, zn = get(round_, "kernel"), get(round_, "znswap")
        # A run that did not finish (killed: under a cgroup, most often its OOM killer)
        # has no time to compare.
        if kernel and zn and kernel["status"] == 0 and zn["status"] == 0:
            ratios.append(kernel["seconds"] / zn["seconds"])
        elif kernel and zn:
            failed_sides = ", ".join(f"{row['side']} exited {row['status']}" for row in (kernel, zn) if row["status"])
            unrated.append(f"round {round_}: no ratio ({failed_sides}; -9 is a kill, under the kernel's cgroup most "
                           "often its OOM killer)")
    digests = {row["stdout_sha256"] for row in results if row["status"] == 0}
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    print(f"{' '.join(command)} with {args.memory} of memory on each side")
    for line in lines:
        print("  ".join(cell.ljust(width) if i < 2 else cell.rjust(width) for i, (cell, width) in enumerate(zip(line, widths))))
    summary = {"command": command, "memory": args.memory, "runs": results,
               "time_ratios_kernel_over_znswap": ratios,
               "median_time_ratio": statistics.median(ratios) if ratios else None,
               "outputs_agree": len(digests) <= 1}
    if ratios:
        print("kernel time / znswap time per round: " + ", ".join(f"{r:.2f}" for r in ratios)
              + f"; median {summary['median_time_ratio']:.2f} (above 1: znswap is faster)")
    for line in unrated:
        print(line)
    print("outputs agree" if summary["outputs_agree"] else "error: the outputs differ between runs")
    print(json.dumps(summary))
    failed = not summary["outputs_agree"] or any(row["status"] != 0 for row in results)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
