#!/usr/bin/env python3
"""A suite of real programs and servers on the kernel's swap, the kernel with zswap, and
znswap, each side with the same memory: the figure of record for znswap's speed.

Every program runs as a user runs it (the scheduler places its threads and the pager's;
nothing is pinned). A round runs a program once on each side, the side going first
rotating from round to round (the disk here may move 2x within minutes, so the sides are
compared in the same minutes). A program's figure is the median over rounds of the
per-round ratio of the other side's time to znswap's (for a server: znswap's ops/s to the
other side's): above 1, znswap is faster. The suite's figure is the geometric mean of the
programs' medians, with the worst program beside it.

Every run is checked: a program's standard output must be the same on every side and
every round (each prints a digest of its results), and a server's client (`znswap kv`)
checks every value it reads back. Each run also records the CPU time of the program (with
the pager's threads under znswap, direct reclaim under the kernel), the machine's busy CPU
time (kswapd and every thread of the pager's included: a CPU the pager burns is taken from
the program), pages swapped in, major faults and peak memory.

Prints a table per program and the summary, and writes everything as JSON (--json).
Needs root (swapon, memory cgroups, zswap's switch); leaves no swap, cgroup or zswap
setting behind.

    sudo scripts/suite.py                        # every program, 3 rounds, swap on the disk
    sudo scripts/suite.py --ram --sides znswap   # znswap with its device in RAM: the software path alone
    sudo scripts/suite.py --only py-sort,redis-hot --rounds 5
    sudo scripts/suite.py --list
"""

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sides  # noqa: E402

WORKLOADS = os.path.join(sides.REPO, "scripts", "workloads")


# The distribution's Python (Debian's has numpy), not a version manager's shim: a shim is a
# shell script that executes the interpreter, and the suite measures the interpreter.
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"


def py(script, *args):
    return [PYTHON, os.path.join(WORKLOADS, script)] + [str(a) for a in args]


class Program:
    """A command run to its end and timed."""

    kind = "command"

    def __init__(self, name, memory, argv, about, needs=()):
        self.name, self.memory, self.argv, self.about, self.needs = name, memory, argv, about, needs

    def missing(self):
        missing = [tool for tool in self.needs if shutil.which(tool) is None]
        if "numpy" in self.needs:
            missing.remove("numpy")
            if subprocess.run([PYTHON, "-c", "import numpy"], capture_output=True).returncode != 0:
                missing.append(f"numpy for {PYTHON} (apt-get install python3-numpy)")
        return missing


class Server(Program):
    """A server under the side, driven from outside by `znswap kv` (every value checked);
    its figure is the client's ops/s."""

    kind = "server"

    def __init__(self, name, memory, argv, protocol, data, seconds, about, needs=()):
        super().__init__(name, memory, argv, about, needs)
        self.protocol, self.data, self.seconds = protocol, data, seconds


def programs(work):
    """The suite: each program with the memory it gets on every side (its data is 2-4x
    that), what it is, and the tools it needs."""
    text = os.path.join(work, "lines.txt")
    head = os.path.join(work, "lines-8m.txt")
    source = os.path.join(work, "big.c")
    walk = os.path.join(work, "pointer-walk")
    return [
        Program("py-dict", "96M", py("py-dict.py", 1_000_000), "Python dict and list of 1M strings, 1/7 read back"),
        Program("py-dict-iter", "96M", py("py-dict-iter.py", 800_000), "Python dict of 800k entries, every item hashed"),
        Program("py-sort", "96M", py("py-sort.py", 1_500_000), "Python sort of 1.5M (int, str) tuples"),
        Program("py-sqlite", "96M", py("py-sqlite.py", 1_000_000, 2_000),
                "sqlite3 in memory: 1M rows, an index, 2000 range queries"),
        Program("py-graph", "96M", py("py-graph.py", 300_000, 6), "Python adjacency lists, a BFS over 300k nodes"),
        Program("py-pool", "128M", py("py-pool.py", 4, 80), "multiprocessing Pool: 4 forked workers, 80 MiB each"),
        Program("numpy", "128M", py("numpy-ops.py", 6), "numpy sort, argsort-gather, cumsum, matmul on 6M doubles",
                needs=("numpy",)),
        Program("perl-hash", "64M", ["perl", os.path.join(WORKLOADS, "perl-hash.pl"), "700000"],
                "perl hash of 700k 100-byte values, read back in order", needs=("perl",)),
        Program("pointer-walk", "96M", [walk, "192", "1"], "C: a random pointer cycle through 192 MiB",
                needs=("cc",)),
        Program("sort", "64M", ["sort", "-S", "256M", "-o", "/dev/stdout", text],
                "coreutils sort with a 256M buffer over 120 MB of lines (its threads)"),
        Program("xz", "48M", ["xz", "-T1", "-9", "-c", head], "xz -9 (a 64 MiB window) over 8 MB of the lines",
                needs=("xz",)),
        Program("zstd-long", "64M", ["zstd", "-T1", "-q", "-3", "--long=28", "-c", text],
                "zstd --long=28 (a 256 MiB window) over the lines", needs=("zstd",)),
        Program("gcc", "128M", ["cc", "-O1", "-c", "-o", "/dev/null", source],
                "gcc -O1 on one generated 60k-line unit", needs=("cc",)),
        Server("redis-hot", "128M", ["redis-server", "--bind", "127.0.0.1", "--port", "{port}", "--save", "",
                                     "--appendonly", "no", "--dir", work],
               "redis", "384M", 20, "redis under a read-mostly skewed mix (znswap kv --mix hot)",
               needs=("redis-server",)),
        Server("memcached-hot", "128M", ["memcached", "-u", "root", "-l", "127.0.0.1", "-p", "{port}", "-U", "0",
                                         "-t", "2", "-m", "4096", "-o", "hashpower=17"],
               "memcache", "384M", 20, "memcached (2 threads) under the same mix", needs=("memcached",)),
    ]


def prepare(work, chosen):
    """Inputs the programs read, made once per suite (the same bytes every run)."""
    names = {p.name for p in chosen}
    if names & {"sort", "xz", "zstd-long"}:
        rng = random.Random(5)
        with open(os.path.join(work, "lines.txt"), "w") as f:
            for i in range(2_000_000):
                f.write("%016x %s %d\n" % (rng.getrandbits(64), "w" * rng.randrange(20, 60), i))
        with open(os.path.join(work, "lines.txt"), "rb") as f, open(os.path.join(work, "lines-8m.txt"), "wb") as out:
            out.write(f.read(8_000_000))
    if "gcc" in names:
        with open(os.path.join(work, "big.c"), "w") as f:
            for i in range(3_000):
                f.write(f"int f{i}(int *a, int n) {{ int s = {i}; for (int i = 0; i < n; i++) {{ "
                        f"s += a[i] * {i % 7 + 1}; if (s > {i * 13}) s ^= a[(i + {i}) % n]; }} return s; }}\n")
            f.write("int table(int *a, int n) { int s = 0;\n")
            for i in range(3_000):
                f.write(f"  s += f{i}(a, n);\n")
            f.write("  return s; }\n")
            # One big function: the optimizer's memory grows with it.
            f.write("int big(int *a) { int x = 0;\n")
            for i in range(50_000):
                f.write(f"  x = x * 31 + a[{i % 997}] - {i};\n")
            f.write("  return x; }\n")
    if "pointer-walk" in names:
        subprocess.run(["cc", "-O2", "-o", os.path.join(work, "pointer-walk"),
                        os.path.join(WORKLOADS, "pointer-walk.c")], check=True)


def run_side(args, program, side, round_, znswap, device, swap):
    budget = sides.size(program.memory)
    sides.drop_caches()
    port = sides.free_port()
    argv = [a.replace("{port}", str(port)) for a in program.argv]
    cgroup = stats = None
    row = {"program": program.name, "side": side, "round": round_}
    if side in ("znswap", "baseline"):
        binary = args.baseline if side == "baseline" else znswap
        sides.create_device(binary, device, budget)
        stats = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
        argv = sides.znswap_argv(binary, program.memory, device, stats, args.znswap_args.split(), argv)
    else:
        cgroup = sides.Cgroup(budget, "suite")
        argv = cgroup.wrap(argv)
    try:
        context = swap.on(zswap=side == "zswap") if side in ("kernel", "zswap") else _nothing()
        with context:
            if program.kind == "command":
                row.update(sides.run_command(argv, timeout=args.timeout))
            else:
                client = [znswap, "kv", "--protocol", program.protocol, "--addr", f"127.0.0.1:{port}",
                          "--data", program.data, "--mix", "hot", "--seconds", str(program.seconds),
                          "--seed", str(round_), "--json"]
                row.update(sides.run_server(argv, client, port, timeout=args.timeout))
                row["ops_per_second"] = ((row.get("client") or {}).get("run") or {}).get("ops_per_s")
    finally:
        if cgroup:
            row["cgroup_peak_bytes"] = cgroup.peak_bytes()
            row["oom_kills"] = cgroup.oom_kills()
            row["cgroup_major_faults"] = cgroup.stat("pgmajfault") if not cgroup.v2 else cgroup.stat("pgmajfault")
            cgroup.remove()
        if stats:
            report = sides.znswap_report(stats)
            os.unlink(stats)
            pager = report.get("pager") or {}
            row["swap_in_reads"] = pager.get("swap_in_reads")
            row["swap_outs_written"] = pager.get("swap_outs_written")
            # Of the pages swapped in, those the compressed pool served (no device read),
            # as the kernel's zswpin are counted in its pages in.
            row["compressed_pool_pages_served"] = pager.get("compressed_pool_pages_served", 0)
            # Refaults a budget an eighth larger would have saved (what the pool's memory
            # costs the heap).
            row["refaults_near"] = pager.get("refaults_near", 0)
            row["missing_faults"] = pager.get("missing_faults")
            row["tree_memory_max_bytes"] = (report.get("tree") or {}).get("memory_used_max_bytes")
    row["pages_in"] = row.get("swap_in_reads") if stats else row.get("pswpin", 0) + row.get("zswpin", 0)
    return row


def median_or_none(values):
    return statistics.median(values) if values else None


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def score(program, row):
    """The run's figure, larger is better (None if the run failed)."""
    if row.get("status") != 0:
        return None
    if program.kind == "command":
        return 1.0 / row["seconds"]
    return row.get("ops_per_second")


def oom_killed(row):
    """Whether the run's memory cgroup OOM-killed it (the kernel's sides)."""
    return (row.get("oom_kills") or 0) > 0


def timed_out(args, row):
    """Whether the run failed at the --timeout limit."""
    return row.get("status") != 0 and row.get("seconds", 0) >= args.timeout


def why_failed(args, row):
    """Why a run failed, in a few words."""
    if oom_killed(row):
        return f"status {row['status']}, OOM-killed by its memory cgroup"
    if timed_out(args, row):
        return f"killed at the {args.timeout:.0f} s limit"
    return f"status {row['status']}"


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(args, chosen, rows):
    others = [s for s in args.sides if s != "znswap"]
    summary = {"rounds": args.rounds, "ram": args.ram, "sides": args.sides, "programs": {}}
    for program in chosen:
        mine = [r for r in rows if r["program"] == program.name]
        entry = {"memory": program.memory, "kind": program.kind, "about": program.about, "ratios": {},
                 "failed_runs": [f"{r['side']} round {r['round']}: {why_failed(args, r)}"
                                 for r in mine if r.get("status") != 0]}
        digests = {r.get("stdout_sha256") for r in mine if r.get("status") == 0 and program.kind == "command"}
        entry["outputs_agree"] = len(digests) <= 1
        for side in args.sides:
            runs = [r for r in mine if r["side"] == side]
            key = "seconds" if program.kind == "command" else "ops_per_second"
            good = [r for r in runs if r.get("status") == 0]
            entry[side] = {
                key: statistics.median([r[key] for r in good]) if good else None,
                "cpu_seconds": statistics.median([r["cpu_seconds"] for r in runs]) if runs else None,
                "machine_cpu_seconds": statistics.median([r["machine_cpu_seconds"] for r in runs]) if runs else None,
                # A run whose figures were not written (its report missing) has no count:
                # left out, not taken as 0.
                "pages_in": median_or_none([r["pages_in"] for r in runs if r["pages_in"] is not None]),
                "peak_rss_bytes": max((r["peak_rss_bytes"] for r in runs), default=None),
                # Runs the memory cgroup OOM-killed (the kernel's sides), and runs past --timeout.
                "oom_killed": sum(1 for r in runs if oom_killed(r)),
                "timed_out": sum(1 for r in runs if timed_out(args, r)),
            }
        if "znswap" in args.sides:
            for other in others:
                ratios = []
                for round_ in range(1, args.rounds + 1):
                    zn = next((r for r in mine if r["side"] == "znswap" and r["round"] == round_), None)
                    ot = next((r for r in mine if r["side"] == other and r["round"] == round_), None)
                    if zn and ot and score(program, zn) and score(program, ot):
                        ratios.append(score(program, zn) / score(program, ot))
                entry["ratios"][other] = {"per_round": ratios,
                                          "median": statistics.median(ratios) if ratios else None}
        summary["programs"][program.name] = entry
    for other in others:
        medians = {name: e["ratios"].get(other, {}).get("median") for name, e in summary["programs"].items()}
        rated = {k: v for k, v in medians.items() if v}
        worst = min(rated, key=rated.get) if rated else None
        summary[f"znswap_over_{other}"] = {
            "geomean": geomean(list(rated.values())), "worst": rated.get(worst), "worst_program": worst,
            "unrated": sorted(k for k, v in medians.items() if not v)}
    return summary


def print_table(args, summary):
    sides_ = args.sides
    head = ["program", "memory"]
    for side in sides_:
        head += [f"{side} s|ops", f"{side} cpu", f"{side} in"]
    head += [f"vs {s}" for s in sides_ if s != "znswap"] + ["check"]
    lines = [head]
    for name, e in summary["programs"].items():
        line = [name, e["memory"]]
        for side in sides_:
            s = e[side]
            value = s.get("seconds") if e["kind"] == "command" else s.get("ops_per_second")
            line += ["-" if value is None else (f"{value:.1f}" if e["kind"] == "command" else f"{value:.0f}"),
                     f"{s['machine_cpu_seconds']:.1f}", "-" if s["pages_in"] is None else f"{s['pages_in'] / 1000:.0f}k"]
        for other in sides_:
            if other != "znswap":
                m = e["ratios"].get(other, {}).get("median")
                line.append("-" if m is None else f"{m:.2f}")
        line.append(("ok" if e["outputs_agree"] else "OUTPUTS DIFFER") + ("" if not e["failed_runs"] else " (failures)"))
        lines.append(line)
    widths = [max(len(l[i]) for l in lines) for i in range(len(head))]
    where = "RAM (loop device over /dev/shm; znswap's device in /dev/shm)" if args.ram else "the disk"
    print(f"\n{args.rounds} rounds, swap on {where}; seconds (ops/s for servers), machine CPU seconds, "
          "pages swapped in; medians; 'vs X': X's time / znswap's (above 1: znswap is faster)")
    for line in lines:
        print("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))))
    for other in sides_:
        if other != "znswap" and "znswap" in sides_:
            s = summary[f"znswap_over_{other}"]
            if s["geomean"]:
                print(f"znswap vs {other}: geometric mean {s['geomean']:.2f}x, worst {s['worst']:.2f}x "
                      f"({s['worst_program']})" + (f"; no figure for {', '.join(s['unrated'])}" if s["unrated"] else ""))
    # A program the kernel's cgroup OOM-kills is a result, not a gap: counted here.
    killed = {side: sum(e[side]["oom_killed"] for e in summary["programs"].values()) for side in sides_}
    runs = len(summary["programs"]) * args.rounds
    print("runs OOM-killed: " + ", ".join(f"{side} {killed[side]} of {runs}" for side in sides_))
    for name, e in summary["programs"].items():
        for failure in e["failed_runs"]:
            print(f"{name}: {failure}")


def _stop(signum, frame):
    raise KeyboardInterrupt


def run_rounds(args, chosen, znswap, device, swap, rows):
    """Every round of every chosen program on every side, the side going first rotating;
    each run's figures appended to `rows` as it ends."""
    started = time.monotonic()
    for number, program in enumerate(chosen, 1):
        for round_ in range(1, args.rounds + 1):
            shift = (round_ - 1) % len(args.sides)
            order = args.sides[shift:] + args.sides[:shift]
            for side in order:
                print(f"[{time.monotonic() - started:6.0f} s] {program.name} ({number}/{len(chosen)}) "
                      f"round {round_}/{args.rounds}: {side}", file=sys.stderr, flush=True)
                row = run_side(args, program, side, round_, znswap, device, swap)
                value = row.get("seconds") if program.kind == "command" else row.get("ops_per_second")
                print(f"          status {row.get('status')}, {value if value is None else round(value, 2)}"
                      f" {'s' if program.kind == 'command' else 'ops/s'}, machine CPU "
                      f"{row['machine_cpu_seconds']:.1f} s, pages in {row['pages_in']}",
                      file=sys.stderr, flush=True)
                if row.get("status") != 0:
                    print(row.get("stderr_tail", "")[-1500:], file=sys.stderr)
                rows.append(row)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per program [default: 3]")
    parser.add_argument("--only", help="a comma-separated list of programs (see --list)")
    parser.add_argument("--sides", default=",".join(sides.SIDES),
                        help="a comma-separated list of kernel, zswap, znswap [default: all three]")
    parser.add_argument("--ram", action="store_true",
                        help="swap in RAM on every side: the kernel's on a loop device over /dev/shm, "
                        "znswap's device in /dev/shm (the software path alone)")
    parser.add_argument("--znswap", help="the znswap binary [default: a release build of this repository]")
    parser.add_argument("--znswap-args", default="", help="more flags for `znswap run`")
    parser.add_argument("--baseline", metavar="BIN",
                        help="another znswap binary (an earlier build) run as one more side, 'baseline', with the "
                        "same flags: an A/B of two builds in the same minutes")
    parser.add_argument("--timeout", type=float, default=600, help="seconds before a run is killed [default: 600]")
    parser.add_argument("--json", help="write the runs and the summary here")
    parser.add_argument("--list", action="store_true", help="list the programs and exit")
    args = parser.parse_args()
    # SIGTERM stops it as Ctrl-C does: the run in progress killed, the kernel's swap
    # turned off, the device file and the scratch directory removed, the runs so far kept.
    signal.signal(signal.SIGTERM, _stop)
    work = tempfile.mkdtemp(prefix="znswap-suite-")
    try:
        every = programs(work)
        if args.list:
            for p in every:
                print(f"{p.name:14} {p.memory:>5}  {p.about}")
            return
        args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
        bad = [s for s in args.sides if s not in sides.SIDES]
        if bad or not args.sides:
            parser.error(f"--sides takes kernel, zswap and znswap, not {', '.join(bad) or 'nothing'}")
        if args.baseline:
            if not os.access(args.baseline, os.X_OK):
                parser.error(f"--baseline {args.baseline}: no such executable (give a znswap binary)")
            args.sides.append("baseline")
        chosen = every
        if args.only:
            wanted = [n.strip() for n in args.only.split(",") if n.strip()]
            unknown = [n for n in wanted if n not in {p.name for p in every}]
            if unknown:
                parser.error(f"no program {', '.join(unknown)} in the suite (see --list)")
            chosen = [p for p in every if p.name in wanted]
        if args.rounds < 1:
            parser.error("--rounds must be at least 1")
        if args.ram and set(args.sides) & {"kernel", "zswap"}:
            # Seen on Linux 6.18 with cgroup v1: the loop device charges its writes to the
            # program's memory cgroup, so the tmpfs pages behind the swap device were
            # themselves swapped out to it, and swapoff hung for good in shmem_unuse (a
            # process in D state, the device never freed).
            sys.exit("error: --ram is disabled for the kernel's sides: a loop device over /dev/shm deadlocks under a "
                     "memory cgroup (its backing pages are charged to the cgroup and swapped to the loop device "
                     "itself). Use --sides znswap with --ram, or the disk")
        if os.geteuid() != 0:
            sys.exit("error: needs root (swapon, memory cgroups, zswap's switch); run it with sudo")
        for p in chosen:
            if p.missing():
                sys.exit(f"error: {p.name} needs {', '.join(p.missing())}: install it, or leave it out with --only")
        znswap = sides.znswap_binary(args.znswap)
        prepare(work, chosen)
        cache = "/dev/shm" if args.ram else os.path.expanduser("~/.cache/znswap")
        os.makedirs(cache, exist_ok=True)
        device = os.path.join(cache, f"suite-{os.getpid()}.zns")
        swap = sides.KernelSwap(cache, 8 << 30, ram=args.ram) if set(args.sides) & {"kernel", "zswap"} else None
        rows = []
        try:
            run_rounds(args, chosen, znswap, device, swap, rows)
        except KeyboardInterrupt:
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"stopped": True, "runs": rows}, f, indent=1)
            print(f"stopped after {len(rows)} runs" + (f" (kept in {args.json})" if args.json else "")
                  + "; nothing left behind", file=sys.stderr)
            sys.exit(130)
        finally:
            if swap:
                swap.remove()
            if os.path.exists(device):
                os.unlink(device)
        summary = summarize(args, chosen, rows)
        print_table(args, summary)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"summary": summary, "runs": rows}, f, indent=1)
        print(json.dumps(summary))
        failed = any(not e["outputs_agree"] for e in summary["programs"].values())
        sys.exit(1 if failed else 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
