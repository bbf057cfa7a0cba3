#!/usr/bin/env bash
# A real key-value server on the kernel's own swap and on znswap, same memory budget, same
# disk, every value checked by `znswap kv` (the paper's Fig. 12/13, live).
#
# (A) kernel: the server in a child memory cgroup (v1 or v2) limited to --memory, with a
#     swap file on the file system that holds znswap's device (as
#     scripts/kernel-swap-compare.sh does).
# (B) znswap: `znswap run --memory M --device D --stats F -- SERVER ARGS`.
# A round runs both, the side going first alternating from round to round; each side
# starts the server, waits until it accepts connections, runs `znswap kv` (load, the mix
# for --seconds, a sweep of every key) from outside the cgroup, records ops/s, p99 and
# the server's peak RSS, and stops the server. Prints per-round ratios (znswap/kernel
# ops/s, kernel/znswap p99: above 1, znswap is better) and their medians, as a table and
# as JSON; and the timed mix alone per operation (swap-ins, faults, server CPU), from
# counters `znswap kv --phase-hook` takes at the mix's start and end (with the machine's
# TLB shootdowns). memcached starts with its hash table sized for the items --data makes
# (`-o hashpower`, both sides), as an operator who knows the item count sets it. Needs
# root, python3 and the server. Leaves no swap or cgroup behind.
#
# Usage: scripts/kv-compare.sh [--server memcached|redis] [--data 1G] [--memory 256M]
#        [--seconds 30] [--rounds 3] [--connections 2] [--znswap PATH] [--device PATH]
#        [--only kernel|znswap] [--znswap-args "ARGS"] [--client-cpus LIST] [--server-cpus LIST]
# --data is the value bytes `znswap kv` loads (the server takes about twice that with its
# keys and overheads); --znswap defaults to a release build of this repository; --device
# is znswap's device file, created anew each round [default: $ZNSWAP_DEVICE, else
# ~/.cache/znswap/kv-compare.zns, removed at the end]; --znswap-args are more flags for
# `znswap run` (e.g. "--readahead 16"); --client-cpus runs the client on those CPUs only
# (taskset's list, both sides): on a small virtual machine the client shares the server's
# CPUs, and whether the scheduler puts it on the server's CPU or on an idle one whose
# wake-ups cost a halted vCPU's exit moved znswap's redis rounds from 9.7k to 14.6k ops/s
# (scripts/fault-trace.py --peer shows where it ran); pinned, every round is in one mode.
# --server-cpus runs the server on those CPUs only (both sides; under znswap the pager's
# threads too, since `znswap run` is started there): with --client-cpus on the others,
# the client takes none of the server's CPU time and never shares its run queue, as a
# client on another machine would (the placement the README's redis figures state).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
server=memcached data=1G memory=256M seconds=30 rounds=3 connections=2 znswap="" only="" znswap_args="" client_cpus="" server_cpus=""
device=${ZNSWAP_DEVICE:-} device_ours=""
while [ $# -gt 0 ]; do
    case "$1" in
        --server) server=$2; shift ;;
        --data) data=$2; shift ;;
        --memory) memory=$2; shift ;;
        --seconds) seconds=$2; shift ;;
        --rounds) rounds=$2; shift ;;
        --connections) connections=$2; shift ;;
        --znswap) znswap=$2; shift ;;
        --device) device=$2; shift ;;
        --only) only=$2; shift ;;
        --znswap-args) znswap_args=$2; shift ;;
        --client-cpus) client_cpus=$2; shift ;;
        --server-cpus) server_cpus=$2; shift ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
die() { echo "error: $*" >&2; exit 1; }
case "$only" in ""|kernel|znswap) ;; *) die "--only takes kernel or znswap, not $only" ;; esac
# Dies unless CPU list $2 (given as flag $1) is one taskset can run on here.
check_cpus() {
    command -v taskset >/dev/null || die "$1 needs taskset (apt-get install util-linux)"
    taskset -c "$2" true 2>/dev/null \
        || die "$1 $2 is not a CPU list this machine can run on (e.g. 0 or 0-1; it has $(nproc) CPUs)"
}
client=() pinned_server=()
if [ -n "$client_cpus" ]; then check_cpus --client-cpus "$client_cpus"; client=(taskset -c "$client_cpus"); fi
if [ -n "$server_cpus" ]; then check_cpus --server-cpus "$server_cpus"; pinned_server=(taskset -c "$server_cpus"); fi
[ "$(id -u)" = 0 ] || die "needs root (swapon, memory cgroups); run it with sudo"
command -v python3 >/dev/null || die "needs python3 (apt-get install python3)"
case "$server" in
    memcached) binary=/usr/bin/memcached protocol=memcache package=memcached ;;
    redis) binary=/usr/bin/redis-server protocol=redis package=redis-server ;;
    *) die "--server takes memcached or redis, not $server" ;;
esac
[ -x "$binary" ] || die "$binary is missing: apt-get install $package"
if [ -z "$device" ]; then
    # Ours to remove at the end: it holds the server's swapped-out pages.
    device=$HOME/.cache/znswap/kv-compare.zns device_ours=1
fi
binary_real=$(readlink -f "$binary")

if [ -z "$znswap" ]; then
    (cd "$repo" && cargo build --release -q -p znswap -p znswap-preload)
    znswap="${CARGO_TARGET_DIR:-$repo/target}/release/znswap"
fi
[ -x "$znswap" ] || die "no znswap at $znswap"
if [ "$only" != kernel ] && ! "$znswap" run --help >/dev/null 2>&1; then
    die "$znswap has no \`run\` subcommand (it runs a program with its heap paged by znswap): give --znswap a build that has it, or --only kernel"
fi

bytes() { python3 -c "import sys; u={'K':1<<10,'M':1<<20,'G':1<<30}; s=sys.argv[1].upper().rstrip('B').rstrip('I'); print(int(float(s[:-1])*u[s[-1]]) if s[-1] in u else int(s))" "$1"; }
budget=$(bytes "$memory")
data_bytes=$(bytes "$data")
# Room for what the server holds beyond --data (keys, item headers, slab or allocator
# rounding: about twice --data for small values) and then some.
footprint=$(( data_bytes * 4 + (1 << 30) ))
# memcached's hash table at the size its load would grow it to (it doubles past 1.5 items
# a bucket; ETC values average ~180 B), as an operator who knows the item count sets it:
# grown during the load instead, each doubling walks every item, which on a data set 4x
# the memory is a swap-in per item on either side and makes the load, not the mix, the
# measurement.
hashpower=$(python3 -c "import math, sys; print(max(16, math.ceil(math.log2(int(sys.argv[1]) / 180 / 1.5))))" "$data_bytes")

mkdir -p "$(dirname "$device")"
swapfile="$(dirname "$device")/kv-compare.swap"
work=$(mktemp -d)
cgroup="" server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then stop_server || true; fi
    swapoff "$swapfile" 2>/dev/null || true
    rm -f "$swapfile"
    if [ -n "$device_ours" ]; then rm -f "$device"; fi
    if [ -n "$cgroup" ] && [ -d "$cgroup" ]; then rmdir "$cgroup" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# The server's command line, into the array server_cmd. memcached's -m is a cap, not an
# allocation: big enough that it never evicts (a miss would fail the check).
server_command() {
    local port=$1
    if [ "$server" = memcached ]; then
        local cap=$(( footprint >> 20 )); [ "$cap" -ge 4096 ] || cap=4096
        server_cmd=("$binary" -u root -l 127.0.0.1 -p "$port" -U 0 -t 2 -m "$cap" -o "hashpower=$hashpower")
    else
        server_cmd=("$binary" --bind 127.0.0.1 --port "$port" --save "" --appendonly no --maxmemory 0 --dir "$work")
    fi
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Waits until the server accepts connections on $1 (it may start slowly under a pager).
wait_for_port() {
    local port=$1 log=$2
    for _ in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        kill -0 "$server_pid" 2>/dev/null || { tail -20 "$log" >&2; die "the server exited before accepting connections (log above)"; }
        sleep 0.1
    done
    tail -20 "$log" >&2
    die "the server does not accept connections on port $port after 60 s"
}

# The server's own process: $server_pid itself (kernel side: sh exec'd it), or its child
# running the server binary (znswap run starts the server as its child).
server_process() {
    local pid
    for pid in "$server_pid" $(cat "/proc/$server_pid/task/"*/children 2>/dev/null); do
        if [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$binary_real" ]; then echo "$pid"; return; fi
    done
}

# CPU seconds the process used (user + system; direct reclaim and znswap's threads
# included).
cpu_seconds() {
    local pid=$1
    [ -n "$pid" ] && awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13) / hz }' "/proc/$pid/stat" 2>/dev/null || true
}

peak_rss_bytes() {
    local pid=$1
    [ -n "$pid" ] && awk '/^VmHWM:/ { print $2 * 1024 }' "/proc/$pid/status" 2>/dev/null || true
}

stop_server() {
    local pid=$server_pid child
    child=$(server_process)
    # The server first: znswap run then ends as its child does.
    kill -TERM ${child:-} "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL ${child:-} "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    server_pid=""
}

make_cgroup() {
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        local parent=/sys/fs/cgroup$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup)
        cgroup="$parent/znswap-kv-$$"
        mkdir "$cgroup"
        echo "$budget" > "$cgroup/memory.max"
    else
        local parent=/sys/fs/cgroup/memory$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
        cgroup="$parent/znswap-kv-$$"
        mkdir "$cgroup"
        echo "$budget" > "$cgroup/memory.limit_in_bytes"
        echo 60 > "$cgroup/memory.swappiness" 2>/dev/null || true
    fi
}

cgroup_peak_bytes() {
    cat "$cgroup/memory.max_usage_in_bytes" 2>/dev/null || cat "$cgroup/memory.peak" 2>/dev/null || true
}

# Major faults the cgroup took (its swap-ins that waited for the disk).
cgroup_major_faults() {
    awk '$1 == "pgmajfault" { print $2 }' "$cgroup/memory.stat" 2>/dev/null || true
}

# The machine's pages swapped in and out so far (/proc/vmstat; nothing else swaps here).
vmstat_swap() { awk '$1 == "pswpin" { i = $2 } $1 == "pswpout" { o = $2 } END { print i + 0, o + 0 }' /proc/vmstat; }

# The server's counters at a phase of `znswap kv` (its --phase-hook, before and after the
# timed mix), as JSON in $1: the machine's pswpin/pswpout, the cgroup's pgmajfault (kernel
# side), the server's CPU seconds, and znswap's own report (its library writes one each
# second, to the file its ZNSWAP_RUN_CONFIG names: the hook waits for a fresh one; kv
# waits for the hook, outside its timed part).
cat >"$work/phase-hook.sh" <<'HOOK'
out=$1 pid=$2 cgroup=$3 stats=$4
[ -n "$stats" ] && sleep 1.2
python3 - "$out" "$pid" "$cgroup" "$stats" <<'PY'
import json, os, sys
out, pid, cgroup, stats = sys.argv[1:]
def pairs(path):
    # "name value" lines (/proc/vmstat, memory.stat) and "Name: value kB" ones (status).
    found = {}
    try:
        for line in open(path):
            words = line.split()
            if len(words) >= 2 and words[1].isdigit():
                found[words[0]] = int(words[1])
    except OSError:
        pass
    return found
vm = pairs("/proc/vmstat")
memory = pairs(os.path.join(cgroup, "memory.stat")) if cgroup else {}
def process_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), fields[1]
try:
    cpu, parent = process_cpu(pid)
    # Under `znswap run --serve` the pager's threads run in the launcher (the server's
    # parent): its CPU counts too (otherwise a waiting launcher's, next to nothing).
    if os.path.basename(os.readlink(f"/proc/{parent}/exe")) == "znswap":
        cpu += process_cpu(parent)[0]
except (OSError, IndexError, ValueError):
    cpu = None
report = None
if stats:
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        config = next(json.loads(v.split(b"=", 1)[1]) for v in environ if v.startswith(b"ZNSWAP_RUN_CONFIG="))
        report = json.load(open(config["stats"]))
    except (OSError, ValueError, KeyError, StopIteration):
        report = None
status = pairs(f"/proc/{pid}/status")
# TLB shootdowns taken by every CPU (the "TLB:" row of /proc/interrupts): each write
# protect, unmap or discard of a page another CPU may cache interrupts those CPUs.
tlb = None
try:
    row = next(line.split() for line in open("/proc/interrupts") if line.split()[:1] == ["TLB:"])
    tlb = sum(int(word) for word in row[1:] if word.isdigit())
except (OSError, StopIteration):
    pass
json.dump({"tlb_shootdowns": tlb, "pswpin": vm.get("pswpin"), "pswpout": vm.get("pswpout"), "pgmajfault": memory.get("pgmajfault"),
           "cpu_seconds": cpu, "znswap": report, "cgroup_memory_stat": memory or None,
           "rss_anon_kib": status.get("RssAnon:"), "rss_file_kib": status.get("RssFile:")}, open(out, "w"))
PY
HOOK

# One side of one round: writes $work/<side>-<round>.json.
run_side() {
    local side=$1 round=$2 port log kv_out status=0 peak="" cgroup_peak="" stats="" major="" swap_before swap_after cpu=""
    port=$(free_port)
    server_command "$port"
    log="$work/$side-$round.log"
    kv_out="$work/$side-$round.kv.json"
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    echo "== round $round of $rounds: $server on $side, $data of values in $memory" >&2
    if [ "$side" = kernel ]; then
        swapon "$swapfile"
        make_cgroup  # a fresh cgroup per round: its peak is this round's
        "${pinned_server[@]}" sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cgroup" "${server_cmd[@]}" >"$log" 2>&1 &
    else
        "$znswap" device create --device "$device" --zones "$(( (footprint * 2 + (62 << 20) - 1) / (62 << 20) ))" \
            --zone-size 64M --zone-capacity 62M --force >/dev/null
        stats="$work/$side-$round.stats.json"
        # shellcheck disable=SC2086 # --znswap-args are words
        "${pinned_server[@]}" "$znswap" run --memory "$memory" --device "$device" --stats "$stats" $znswap_args \
            -- "${server_cmd[@]}" >"$log" 2>&1 &
    fi
    server_pid=$!
    swap_before=$(vmstat_swap)
    wait_for_port "$port" "$log"
    hook="bash '$work/phase-hook.sh' '$work/$side-$round.'\$ZNSWAP_KV_PHASE.json '$(server_process)' '${cgroup:-}' '${stats:-}'"
    "${client[@]}" "$znswap" kv --protocol "$protocol" --addr "127.0.0.1:$port" --data "$data" --seconds "$seconds" \
        --connections "$connections" --seed "$round" --phase-hook "$hook" --json >"$kv_out" || status=$?
    peak=$(peak_rss_bytes "$(server_process)")
    cpu=$(cpu_seconds "$(server_process)")
    if [ "$side" = znswap ] && [ "$(server_process)" != "$server_pid" ]; then
        # The launcher's CPU too: under --serve the pager's threads run there.
        cpu=$(awk -v a="${cpu:-0}" -v b="$(cpu_seconds "$server_pid")" 'BEGIN { print a + b }')
    fi
    if [ "$side" = kernel ]; then cgroup_peak=$(cgroup_peak_bytes) major=$(cgroup_major_faults); fi
    swap_after=$(vmstat_swap)
    stop_server
    if [ "$side" = kernel ]; then
        swapoff "$swapfile"
        rmdir "$cgroup"; cgroup=""
    fi
    if [ "$status" != 0 ]; then
        # The server's own output (under znswap, the pager's too: a panic names its
        # cause there); the work directory goes at the end.
        echo "== $side round $round: znswap kv failed (exit $status); the server's log ends:" >&2
        tail -30 "$log" >&2
        # A panic of the pager's names its cause before the server's crash report.
        if grep -q "panicked at" "$log"; then
            echo "== the pager's panic:" >&2
            grep -B2 -A8 "panicked at" "$log" | head -40 >&2
        fi
        # A crash report's start names what failed (redis's ends with how to report it).
        if grep -q "BUG REPORT START" "$log"; then
            echo "== the crash report begins:" >&2
            grep -A60 "BUG REPORT START" "$log" | head -60 >&2
        fi
    fi
    python3 - "$kv_out" "$status" "${peak:-}" "${cgroup_peak:-}" "${stats:-}" "${major:-}" "$swap_before" "$swap_after" "${cpu:-}" \
        "$work/$side-$round.mix-start.json" "$work/$side-$round.mix-end.json" >"$work/$side-$round.json" <<'PY'
import json, os, sys
kv_path, status, peak, cgroup_peak, stats_path, major, swap_before, swap_after, cpu, mix_start, mix_end = sys.argv[1:]
def snapshot(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None
mix = {"start": snapshot(mix_start), "end": snapshot(mix_end)}
(in0, out0), (in1, out1) = (map(int, swap_before.split()), map(int, swap_after.split()))
try:
    kv = json.load(open(kv_path))
except ValueError:
    kv = None  # kv ended with an error before its report
stats = None
if stats_path and os.path.exists(stats_path):
    try:
        stats = json.load(open(stats_path))
    except ValueError:
        stats = None
print(json.dumps({"kv": kv, "kv_exit": int(status),
                  "server_peak_rss_bytes": int(peak) if peak else None,
                  "cgroup_peak_bytes": int(cgroup_peak) if cgroup_peak else None,
                  "kernel_major_faults": int(major) if major else None,
                  "kernel_swapped_in_pages": in1 - in0, "kernel_swapped_out_pages": out1 - out0,
                  "server_cpu_seconds": float(cpu) if cpu else None,
                  "znswap_stats": stats, "mix_counters": mix}))
PY
}

sides=(kernel znswap)
[ -n "$only" ] && sides=("$only")
if [ "$only" != znswap ]; then
    echo "== kernel swap: swap file $swapfile, memory cgroup limit $memory" >&2
    fallocate -l "$footprint" "$swapfile" 2>/dev/null || dd if=/dev/zero of="$swapfile" bs=1M count=$((footprint >> 20)) status=none
    chmod 600 "$swapfile"
    mkswap -q "$swapfile" >/dev/null
fi
for round in $(seq 1 "$rounds"); do
    # Alternate who goes first, so a machine warming up or a disk slowing down does not
    # favour one side.
    if [ $((round % 2)) = 1 ]; then order=("${sides[@]}"); else order=($(printf '%s\n' "${sides[@]}" | tac)); fi
    for side in "${order[@]}"; do run_side "$side" "$round"; done
done

python3 - "$work" "$rounds" "$server" "$data" "$memory" "$seconds" "$client_cpus" "$server_cpus" <<'PY'
import json, os, statistics, sys
work, rounds, server, data, memory, seconds, client_cpus, server_cpus = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
def load(side, r):
    path = os.path.join(work, f"{side}-{r}.json")
    return json.load(open(path)) if os.path.exists(path) else None
def figure(result, key):
    run = result and result["kv"] and result["kv"].get("run")
    return run[key] if run else None
def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
rows, failed = [], False
for r in range(1, rounds + 1):
    kernel, znswap = load("kernel", r), load("znswap", r)
    row = {"round": r, "kernel": kernel, "znswap": znswap}
    failed |= any(side is not None and side["kv_exit"] != 0 for side in (kernel, znswap))
    ko, zo = figure(kernel, "ops_per_s"), figure(znswap, "ops_per_s")
    kp, zp = figure(kernel, "p99_us"), figure(znswap, "p99_us")
    row["ops_ratio"] = zo / ko if ko and zo else None
    row["p99_ratio"] = kp / zp if kp and zp else None
    rows.append(row)
sides = [side for side in ("kernel", "znswap") if any(row[side] for row in rows)]
both = len(sides) == 2
for row in rows:
    # The side that ran first (the script alternates when both run).
    row["first"] = ("kernel" if row["round"] % 2 else "znswap") if both else sides[0] if sides else "-"
def rss_mib(result):
    peak = result and result["server_peak_rss_bytes"]
    return peak / (1 << 20) if peak else None
def memory_mib(result):
    # What the limit held at its highest: the cgroup's peak charge (kernel), the
    # program's anonymous memory as znswap run's governor saw it (znswap).
    if not result:
        return None
    stats = result.get("znswap_stats")
    peak = stats["report"].get("memory_used_max_bytes") if stats else result.get("cgroup_peak_bytes")
    return peak / (1 << 20) if peak else None
# Columns: title, the round's value, its format; the ratios only when both sides ran.
columns = [("round", lambda row: row["round"], "d"), ("first", lambda row: row["first"], "s")]
for side in sides:
    columns += [(f"{side} ops/s", lambda row, s=side: figure(row[s], "ops_per_s"), ".0f"),
                (f"{side} p99 µs", lambda row, s=side: figure(row[s], "p99_us"), ".1f"),
                (f"{side} RSS MiB", lambda row, s=side: rss_mib(row[s]), ".0f"),
                (f"{side} mem MiB", lambda row, s=side: memory_mib(row[s]), ".0f")]
if both:
    columns += [("ops z/k", lambda row: row["ops_ratio"], ".2f"), ("p99 k/z", lambda row: row["p99_ratio"], ".2f")]
def cell(value, spec):
    return "-" if value is None else format(value, spec)
summary = {"server": server, "data": data, "memory": memory, "seconds": float(seconds),
           "client_cpus": client_cpus or None, "server_cpus": server_cpus or None, "rounds": rows,
           "median_ops_ratio": median(r["ops_ratio"] for r in rows),
           "median_p99_ratio": median(r["p99_ratio"] for r in rows)}
table = [[title for title, _, _ in columns]]
table += [[cell(get(row), spec) for _, get, spec in columns] for row in rows]
if both:
    table.append(["median"] + [""] * (len(columns) - 3)
                 + [cell(summary["median_ops_ratio"], ".2f"), cell(summary["median_p99_ratio"], ".2f")])
widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
placement = "".join(f"; {who} on CPUs {cpus}" for who, cpus in (("server", server_cpus), ("client", client_cpus)) if cpus)
print(f"{server}, {data} of values, {memory} of memory, {seconds} s per run{placement}; RSS: the server's peak"
      + "; mem: what the limit held at its peak (the cgroup's charge; znswap: anonymous memory)"
      + ("; ops z/k is znswap/kernel and p99 k/z kernel/znswap: above 1, znswap is better" if both else ""))
for line in table:
    print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip())
# Where the time goes: CPU used, faults taken and pages moved for the same work (the
# server's whole life: load, mix and sweep), and for znswap the handlers' time per fault.
print("faults and pages over the server's life (load, mix, sweep); znswap's fault time in µs per fault")
detail = [["round", "side", "CPU s", "faults", "pages in", "pages out", "handler µs", "read µs", "lock µs", "install µs", "room µs"]]
for row in rows:
    k = row.get("kernel")
    if k:
        detail.append([str(row["round"]), "kernel", cell(k.get("server_cpu_seconds"), ".1f"),
                       cell(k.get("kernel_major_faults"), "d") + " major",
                       cell(k.get("kernel_swapped_in_pages"), "d"), cell(k.get("kernel_swapped_out_pages"), "d"),
                       "-", "-", "-", "-", "-"])
    z = row.get("znswap") and row["znswap"].get("znswap_stats")
    if z:
        r = z["report"]["pager"]
        faults = r["missing_faults"] + r["write_protect_faults"]
        per = lambda key: cell(r[key] / 1e3 / faults if faults and key in r else None, ".1f")
        detail.append([str(row["round"]), "znswap", cell(row["znswap"].get("server_cpu_seconds"), ".1f"),
                       f"{r['missing_faults']} + {r['write_protect_faults']} wp",
                       str(r["swap_in_reads"]), str(r["swap_outs_written"]), per("fault_handled_ns"),
                       per("fault_read_ns"), per("fault_lock_wait_ns"), per("fault_install_ns"), per("budget_wait_ns")])
widths = [max(len(line[i]) for line in detail) for i in range(len(detail[0]))]
for line in detail:
    print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip())
# The timed mix alone, per operation: the counters the phase hook took at its start and end.
def mix_delta(result, get):
    counters = result and result.get("mix_counters")
    if not counters or not counters["start"] or not counters["end"]:
        return None
    a, b = get(counters["start"]), get(counters["end"])
    return b - a if a is not None and b is not None else None
def mix_ops(result):
    run = result and result["kv"] and result["kv"].get("run")
    return run["ops"] if run else None
mix_rows = [["round", "side", "ops", "swap-ins/op", "faults/op", "CPU ms/op", "TLB shootdowns/op"]]
for row in rows:
    for side in sides:
        result, ops = row[side], mix_ops(row[side])
        if not ops:
            continue
        per = lambda value, scale=1: cell(value * scale / ops if value is not None else None, ".3f")
        # Which faults cost a device read, and which are round trips that read nothing:
        # the kernel's minor faults (its pgfault less pgmajfault), znswap's missing
        # faults less those that read (touches of parked pages, read-ahead hits) and its
        # write-protect faults.
        if side == "kernel":
            swap_ins = mix_delta(result, lambda c: c["pswpin"])
            faults = mix_delta(result, lambda c: c["pgmajfault"])
            every_fault = mix_delta(result, lambda c: (c.get("cgroup_memory_stat") or {}).get("pgfault"))
            wp_faults = reads = None
            faults_cell = per(faults) + " major of " + per(every_fault)
        else:
            swap_ins = mix_delta(result, lambda c: c["znswap"] and c["znswap"]["pager"]["swap_in_reads"])
            faults = mix_delta(result, lambda c: c["znswap"] and c["znswap"]["pager"]["missing_faults"])
            wp_faults = mix_delta(result, lambda c: c["znswap"] and c["znswap"]["pager"]["write_protect_faults"])
            reads = mix_delta(result, lambda c: c["znswap"] and c["znswap"]["pager"].get("fault_reads"))
            every_fault = None
            faults_cell = per(faults) + " (" + per(reads) + " read) + " + per(wp_faults) + " wp"
        cpu = mix_delta(result, lambda c: c["cpu_seconds"])
        tlb = mix_delta(result, lambda c: c.get("tlb_shootdowns"))
        result["mix_per_op"] = {"ops": ops, "swap_ins": swap_ins, "faults": faults, "write_protect_faults": wp_faults,
                                "every_fault": every_fault, "fault_reads": reads, "cpu_seconds": cpu,
                                "tlb_shootdowns": tlb}
        mix_rows.append([str(row["round"]), side, str(ops), per(swap_ins), faults_cell, per(cpu, 1e3), per(tlb)])
if len(mix_rows) > 1:
    print("the timed mix alone, per operation (counters taken at its start and end; the kernel's swap-ins are pswpin,"
          " its faults major of all; znswap's missing faults (those that read the device) + write-protect faults;"
          " TLB shootdowns are the whole machine's)")
    widths = [max(len(line[i]) for line in mix_rows) for i in range(len(mix_rows[0]))]
    for line in mix_rows:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip())
for row in rows:
    for side in sides:
        kv = row[side] and row[side]["kv"]
        if kv and (kv["wrong"] or kv["missing"]):
            print(f"round {row['round']} {side}: {kv['wrong']} wrong, {kv['missing']} missing values")
print(json.dumps(summary))
if failed:
    print("error: znswap kv failed in some run (wrong or missing values, or an error): see above", file=sys.stderr)
sys.exit(1 if failed else 0)
PY
