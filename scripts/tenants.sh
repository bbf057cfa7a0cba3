#!/usr/bin/env bash
# Isolation between tenants of one `znswap daemon` (the paper's Fig. 11, on real
# processes): a reader tenant, bound by its swap-ins, alone and then beside a writer
# tenant whose rewrites keep the device's GC busy, under the tenant policy (a swap-zone
# per tenant: the GC moves only the writer's data) and under per-core (one swap-zone:
# the tenants' pages mixed in the GC's victims).
#
# Both tenants are `znswap-tenant-load` under `znswap run --daemon` (every page they
# read checked). Per round and policy it prints the reader's accesses/s, its swap-in
# bandwidth (its pages read back by the daemon, over its run) and its access latency
# percentiles (a fault's as the program sees it), alone and beside the writer, and the
# GC bytes charged to each tenant. The reader runs alone, beside the writer, and alone
# again, in the same minutes ("alone" is the mean of the two); policies alternate round
# by round (a virtual disk may move 2x in minutes).
#
# --write-limit RATE gives each tenant that share of the device's writes (the paper's
# Fig. 11 limits both cgroups alike): a tenant's swap-outs and the GC's moves of its
# pages together, so under the tenant policy the writer pays for its own GC, and under
# per-core the reader pays for the GC's moves of its pages. The table then shows what
# the writer wrote a second (swap-outs + GC) and how long each waited for its share.
#
# --fio measures the disk's own share of the interference in the same minutes, with fio
# on a file beside the device: 4 KiB random reads at QD1 (the reader's faults) alone for
# --seconds, and beside the writer's I/O as the daemon made it in that round (its writes,
# swap-outs and GC, in 1 MiB writes at its measured rate, and its 4 KiB reads at its
# measured swap-in rate). Its ratio is what no placement can win back on that disk.
#
# --warm-up SECONDS: the reader's untimed reads between its fill and its timed reads, so
# that the pages its fill left dirty in memory are written out first (at its write
# limit that takes its memory over the limit's rate, and more for what its fill still
# owes: the default is five times that plus 2 s, and 2 s without a limit; a room wait
# in the table's "alone" column says it was too short: at 16M and 4M, 10 s left the
# reader writing 6-7 MiB and waiting 9 µs a fault for room in its timed reads alone). The reader's figures are over its timed reads only: the
# daemon's are taken as they begin. Without it, the reader's own write limit held its
# first reads back for seconds, alone and beside the writer alike (docs/measurements/2026-11-daemon.md, 2026-11-29).
#
# --zone-append-max SIZE caps each write the daemon makes (its device's largest append,
# 1 MiB by default), since a read queued behind a write waits for it. (On VM 2's disk
# fio found no clear gain from writes of 128 or 32 KiB at 4 MB/s: docs/measurements/
# 2026-11-daemon.md, 2026-11-28.)
#
# Usage: scripts/tenants.sh [--rounds 1] [--seconds 15] [--memory 16M] [--reader-mib 128]
#        [--writer-mib 160] [--zones 24] [--zone-size 16M] [--zone-append-max SIZE]
#        [--policies "tenant per-core"] [--write-limit RATE] [--warm-up SECONDS] [--fio]
#        [--znswap PATH] [--json FILE]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=1 seconds=15 memory=16M reader_mib=128 writer_mib=160 zones=24 zone_size=16M
policies="tenant per-core" znswap="" json="" write_limit="" append_max="" fio="" warm_up=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift ;;
        --seconds) seconds=$2; shift ;;
        --memory) memory=$2; shift ;;
        --reader-mib) reader_mib=$2; shift ;;
        --writer-mib) writer_mib=$2; shift ;;
        --zones) zones=$2; shift ;;
        --zone-size) zone_size=$2; shift ;;
        --zone-append-max) append_max=$2; shift ;;
        --fio) fio=1 ;;
        --policies) policies=$2; shift ;;
        --write-limit) write_limit=$2; shift ;;
        --warm-up) warm_up=$2; shift ;;
        --znswap) znswap=$2; shift ;;
        --json) json=$2; shift ;;
        -h|--help) sed -n '2,44p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
die() { echo "error: $*" >&2; exit 1; }
[ -z "$fio" ] || command -v fio >/dev/null || die "--fio needs fio (apt-get install fio)"
if [ -z "$znswap" ]; then
    (cd "$repo" && cargo build --release -q -p znswap -p znswap-preload)
    znswap=$repo/target/release/znswap
fi
load=$(dirname "$znswap")/znswap-tenant-load
[ -x "$load" ] || die "no $load (cargo build --release -p znswap)"
work=$(mktemp -d)
daemon_pid="" writer_pid=""
cleanup() {
    local status=$?
    [ -z "$writer_pid" ] || kill "$writer_pid" 2>/dev/null || true
    [ -z "$daemon_pid" ] || kill "$daemon_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    # A failed run keeps its files (logs, status snapshots) to look at.
    if [ "$status" = 0 ]; then rm -rf "$work"; else echo "tenants.sh: kept $work" >&2; fi
}
trap cleanup EXIT
device=$work/device.zns
socket=$work/daemon.sock
results=$work/results.jsonl

bytes() {  # bytes SIZE: 16M and the like in bytes
    python3 -c "import sys
s = sys.argv[1]; units = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
print(int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s))" "$1"
}
# The daemon's memory: both tenants' grants.
pool=$((2 * $(bytes "$memory")))

limit=()
[ -z "$write_limit" ] || limit=(--write-limit "$write_limit")
if [ -z "$warm_up" ]; then
    warm_up=2
    [ -z "$write_limit" ] ||
        warm_up=$(python3 -c "import sys; print(2 + 5 * int(sys.argv[1]) / int(sys.argv[2]))" \
            "$(bytes "$memory")" "$(bytes "$write_limit")")
fi
geometry=()
[ -z "$append_max" ] || geometry=(--zone-append-max "$append_max")

# The disk alone: fio's 4 KiB random reads at QD1, alone or beside writes of 1 MiB at
# WRITE_BPS and 4 KiB reads at READ_BPS (bytes/s; 0: none); prints its JSON.
probe() {  # probe WRITE_BPS READ_BPS
    local args=(--filename="$work/fio.dat" --direct=1 --ioengine=psync --time_based --runtime="$seconds"
        --output-format=json --name=reader --rw=randread --bs=4k --size=512M --offset=0)
    [ "$1" = 0 ] || args+=(--name=writes --rw=write --bs=1M --rate="$1" --size=256M --offset=512M)
    [ "$2" = 0 ] || args+=(--name=reads --rw=randread --bs=4k --rate="$2" --size=256M --offset=512M)
    fio "${args[@]}"
}
if [ -n "$fio" ]; then
    echo "== a file for fio beside the device" >&2
    fio --name=fill --filename="$work/fio.dat" --size=768M --rw=write --bs=1M --direct=1 --output=/dev/null
fi

reader() {  # reader() OUT: one reader run, its own figures, the daemon's as its timed
    # reads begin (OUT.start) and its summary's at its end
    "$znswap" run --memory "$memory" --daemon "$socket" --tenant reader "${limit[@]}" --stats "$1.summary" -- \
        "$load" reader "$reader_mib" "$seconds" "$warm_up" >"$1" 2>"$1.log" &
    local pid=$!
    until grep -q "timing" "$1.log" 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    # (Until the snapshot shows the reader: once one did not, the run's figures lost.)
    for _ in $(seq 1 20); do
        "$znswap" status --socket "$socket" --json >"$1.start"
        shows_reader "$1.start" && break
        sleep 0.1
    done
    wait "$pid" || die "the reader failed: $(tail -5 "$1.log")"
    shows_reader "$1.start" || die "the daemon's status as the reader's timed reads began shows no reader: $1.start, $1.log"
}
shows_reader() {  # shows_reader STATUS.json: whether that status lists the reader tenant
    python3 -c 'import json, sys; sys.exit(not any(t["name"] == "reader" for t in json.load(open(sys.argv[1]))["tenants"]))' "$1"
}

for round in $(seq 1 "$rounds"); do
    order=$policies
    # Alternate which policy goes first.
    [ $((round % 2)) = 0 ] && order=$(echo "$policies" | tr ' ' '\n' | tac | tr '\n' ' ')
    for policy in $order; do
        echo "== round $round, policy $policy" >&2
        "$znswap" device create --device "$device" --zones "$zones" --zone-size "$zone_size" "${geometry[@]}" --force >/dev/null
        rm -f "$socket"
        "$znswap" daemon --policy "$policy" --memory "$pool" --device "$device" --socket "$socket" \
            2>"$work/daemon.log" &
        daemon_pid=$!
        for _ in $(seq 1 100); do [ -S "$socket" ] && break; sleep 0.1; done
        [ -S "$socket" ] || die "the daemon did not start: $(cat "$work/daemon.log")"
        echo "   reader alone ($seconds s)" >&2
        reader "$work/alone.json"
        "$znswap" run --memory "$memory" --daemon "$socket" --tenant writer "${limit[@]}" -- \
            "$load" writer "$writer_mib" 100000 >"$work/writer.json" 2>"$work/writer.log" &
        writer_pid=$!
        # Until the writer's rewrites have the GC moving data (or 60 s).
        for _ in $(seq 1 600); do
            moved=$("$znswap" status --socket "$socket" --json |
                python3 -c 'import json,sys; print(json.load(sys.stdin)["daemon"]["gc_bytes_written"])')
            [ "$moved" -gt 0 ] && break
            sleep 0.1
        done
        echo "   reader beside the writer ($seconds s; the GC had moved $moved B)" >&2
        "$znswap" status --socket "$socket" --json >"$work/status-before.json"
        reader "$work/beside.json"
        "$znswap" status --socket "$socket" --json >"$work/status.json"
        kill "$writer_pid"
        wait "$writer_pid" 2>/dev/null || true
        writer_pid=""
        # Alone again, so that "alone" is the mean of before and after (the disk drifts).
        echo "   reader alone again ($seconds s)" >&2
        reader "$work/after.json"
        kill "$daemon_pid"
        wait "$daemon_pid" 2>/dev/null || true
        daemon_pid=""
        if [ -n "$fio" ]; then
            # The writer's I/O of this round, on the disk alone.
            rates=$(python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
status, before = json.load(open(f"{work}/status.json")), json.load(open(f"{work}/status-before.json"))
seconds = status["daemon"]["uptime_seconds"] - before["daemon"]["uptime_seconds"]
writer = lambda s: next(t for t in s["tenants"] if t["name"] == "writer")
delta = lambda key: writer(status)[key] - writer(before)[key]
writes = (delta("written_bytes") + delta("gc_bytes_moved")) / seconds
reads = delta("swap_ins") * 4096 / seconds
print(max(int(writes), 4096), max(int(reads), 4096))
PY
)
            echo "   the disk alone (fio, $seconds s each): reads alone, and beside $rates B/s of writes and reads" >&2
            probe 0 0 >"$work/fio-alone.json"
            probe $rates >"$work/fio-beside.json"
        fi
        python3 - "$work" "$round" "$policy" "$fio" >>"$results" <<'PY'
import json, sys
work, round_, policy, fio = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def reader(name):
    run = json.load(open(f"{work}/{name}.json"))
    tenant = json.load(open(f"{work}/{name}.json.summary"))["tenant"]
    # The daemon's figures for the reader as its timed reads began: what follows is theirs.
    start = next(t for t in json.load(open(f"{work}/{name}.json.start"))["tenants"] if t["name"] == "reader")
    faults = max(tenant["faults"] - start["faults"], 1)
    per_fault = lambda part: (tenant["fault_seconds"][part] - start["fault_seconds"][part]) * 1e6 / faults
    return {
        "accesses_per_s": run["accesses_per_s"],
        "swap_in_mb_s": (tenant["swap_ins"] - start["swap_ins"]) * 4096 / run["seconds"] / 1e6,
        # A fault's mean time in the daemon, and its parts: the device read, waiting for room.
        "fault_us": per_fault("handled"), "fault_read_us": per_fault("read"), "fault_room_wait_us": per_fault("room_wait"),
        "written_bytes": tenant["written_bytes"] - start["written_bytes"],
        "p50_us": run["p50_us"], "p99_us": run["p99_us"], "p999_us": run["p999_us"],
        "gc_bytes_charged": tenant["gc_bytes"],
        "throttled_s": tenant.get("throttled_seconds"),
        # The daemon's own timing of its faults (read to wake), beside the program's.
        "daemon_fault_p99_us": tenant.get("fault_p99_us"),
    }
status = json.load(open(f"{work}/status.json"))
before = json.load(open(f"{work}/status-before.json"))
writer_of = lambda s: next((t for t in s["tenants"] if t["name"] == "writer"), None)
writer, writer_before = writer_of(status), writer_of(before)
seconds = status["daemon"]["uptime_seconds"] - before["daemon"]["uptime_seconds"]
def writer_delta(key):
    return (writer[key] - writer_before[key]) if writer and writer_before else None
written, gc = writer_delta("written_bytes"), writer_delta("gc_bytes_moved")
def disk():
    """fio's reader on the disk alone and beside the writer's I/O: MB/s and p99 µs."""
    if not fio:
        return None
    def read(name):
        job = next(j for j in json.load(open(f"{work}/fio-{name}.json"))["jobs"] if j["jobname"] == "reader")
        return {"mb_s": job["read"]["bw_bytes"] / 1e6, "p99_us": job["read"]["clat_ns"]["percentile"]["99.000000"] / 1e3}
    return {"alone": read("alone"), "beside": read("beside")}
before_alone, after_alone = reader("alone"), reader("after")
# The reader alone: the mean of its runs before and after the one beside the writer.
alone = {key: (before_alone[key] + after_alone[key]) / 2
         for key in ("accesses_per_s", "swap_in_mb_s", "p50_us", "p99_us", "p999_us", "fault_us", "fault_room_wait_us")}
alone.update(before=before_alone, after=after_alone)
print(json.dumps({
    "round": round_, "policy": policy,
    "alone": alone, "beside": reader("beside"),
    "writer_gc_bytes_charged": writer["gc_bytes_moved"] if writer else None,
    # What the writer wrote a second while the reader ran beside it: its swap-outs and
    # the GC's moves of its pages (what its write limit charges).
    "writer_write_mb_s": (written + gc) / seconds / 1e6 if written is not None else None,
    "writer_throttled_s": writer_delta("throttled_seconds"),
    "write_limit": writer.get("write_limit_bytes_per_second") if writer else None,
    "device_waf": status["daemon"]["waf"],
    "disk": disk(),
}))
PY
    done
done

python3 - "$results" "$json" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
if sys.argv[2]:
    json.dump(rows, open(sys.argv[2], "w"), indent=1)
mib = lambda b: "-" if b is None else f"{b / 2**20:.1f}"
disk = lambda r: r.get("disk")
ratio = lambda d: (d["beside"]["mb_s"] / d["alone"]["mb_s"], d["beside"]["p99_us"] / d["alone"]["p99_us"])
print(f"{'round':>5} {'policy':<8} | {'reader alone':^26} | {'beside the writer':^26} | {'acc':>5} {'bw':>5} {'p99':>5} | {'fault µs (room)':^19} | {'GC MiB charged':^16} | {'writer':^14} | {'WAF':>4} | {'disk (fio)':^18}")
print(f"{'':>5} {'':<8} | {'acc/s':>7} {'MB/s':>6} {'p99 µs':>10} | {'acc/s':>7} {'MB/s':>6} {'p99 µs':>10} | {'ratio':>5} {'ratio':>5} {'x':>5} | {'alone':>9} {'beside':>9} | {'reader':>7} {'writer':>8} | {'MB/s':>6} {'held s':>7} | {'':>4} | {'MB/s':>6} {'bw':>5} {'p99 x':>5}")
num = lambda v, f: "-" if v is None else format(v, f)
fault = lambda x: f"{x['fault_us']:.0f} ({x['fault_room_wait_us']:.0f})"
for r in rows:
    a, b = r["alone"], r["beside"]
    d = ratio(disk(r)) if disk(r) else (None, None)
    disk_alone = disk(r)["alone"]["mb_s"] if disk(r) else None
    print(f"{r['round']:>5} {r['policy']:<8} | {a['accesses_per_s']:>7.0f} {a['swap_in_mb_s']:>6.1f} {a['p99_us']:>10.0f} | "
          f"{b['accesses_per_s']:>7.0f} {b['swap_in_mb_s']:>6.1f} {b['p99_us']:>10.0f} | "
          f"{b['accesses_per_s'] / a['accesses_per_s']:>5.2f} {b['swap_in_mb_s'] / a['swap_in_mb_s']:>5.2f} "
          f"{b['p99_us'] / a['p99_us']:>5.2f} | "
          f"{fault(a):>9} {fault(b):>9} | "
          f"{mib(b['gc_bytes_charged']):>7} {mib(r['writer_gc_bytes_charged']):>8} | "
          f"{num(r.get('writer_write_mb_s'), '6.1f')} {num(r.get('writer_throttled_s'), '7.1f')} | {r['device_waf']:>4.2f} | "
          f"{num(disk_alone, '6.1f')} {num(d[0], '5.2f')} {num(d[1], '5.2f')}")
import statistics
for policy in dict.fromkeys(r["policy"] for r in rows):
    mine = [r for r in rows if r["policy"] == policy]
    acc = statistics.median(r["beside"]["accesses_per_s"] / r["alone"]["accesses_per_s"] for r in mine)
    bw = statistics.median(r["beside"]["swap_in_mb_s"] / r["alone"]["swap_in_mb_s"] for r in mine)
    p99 = statistics.median(r["beside"]["p99_us"] / r["alone"]["p99_us"] for r in mine)
    line = (f"{policy}: median over {len(mine)} rounds: accesses {acc:.2f} of alone, bandwidth {bw:.2f} of alone, "
            f"p99 {p99:.2f}x alone")
    disks = [ratio(disk(r)) for r in mine if disk(r)]
    if disks:
        line += (f"; the disk alone under the same I/O: {statistics.median(d[0] for d in disks):.2f}, "
                 f"{statistics.median(d[1] for d in disks):.2f}x")
    print(line)
print("(alone: the mean of the reader's runs before and after the one beside the writer; acc ratio: its accesses")
print(" a second beside the writer over alone; bw ratio: its swap-in bandwidth beside over alone (pages read,")
print(" read-ahead included: a reader that reads more than it touches shows more); p99 x: its access p99 beside over alone;")
print(" fault µs (room): a fault's mean time in the daemon, and of it the wait for room in the reader's budget;")
print(" GC MiB charged: bytes of each tenant's data the GC moved while the reader ran beside the writer;")
print(" writer MB/s: its swap-outs and the GC's moves of its pages a second while the reader ran beside it, and the")
print(" seconds it was held back by its write limit then; disk (fio): fio's 4 KiB reads at QD1 alone (MB/s), and")
print(" beside the writer's writes and reads of that round, at their rates, over alone, on the disk without znswap)")
PY
