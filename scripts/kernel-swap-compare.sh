#!/usr/bin/env bash
# znswap against the kernel's own swap, same workload, same budget, same disk.
#
# The kernel side: a swap file on the file system that holds znswap's device, and the
# bench process in a child memory cgroup (v1 or v2) whose limit is the budget; the bench
# runs the very same access streams over plain anonymous memory (`--kernel-swap`).
# The znswap side: `znswap bench` on the device file. Prints both and znswap/kernel
# ratios. Needs root. Leaves no swap or cgroup behind.
#
# Usage: scripts/kernel-swap-compare.sh [--memory 1G] [--wss 4G] [--workload anon-w-rand]
#        [--threads N] [--seconds 30] [--device PATH] [--rounds N]
# The two run in turn N times (--rounds, default 3: kernel, znswap, kernel, ...) and the
# ratios are taken pair by pair, so a machine whose speed drifts still compares fairly;
# the spread of the per-round ratios is printed beside their median.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
memory=1G wss=4G workload=anon-w-rand threads=1 seconds=30 rounds=3
device=${ZNSWAP_DEVICE:-$HOME/.cache/znswap/compare.zns}
while [ $# -gt 0 ]; do
    case "$1" in
        --memory) memory=$2; shift ;;
        --wss) wss=$2; shift ;;
        --workload) workload=$2; shift ;;
        --threads) threads=$2; shift ;;
        --seconds) seconds=$2; shift ;;
        --device) device=$2; shift ;;
        --rounds) rounds=$2; shift ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "error: needs root (swapon, cgroups)" >&2; exit 1; }
(cd "$repo" && cargo build --release -q -p znswap)
znswap="$repo/target/release/znswap"
bytes() { python3 -c "import sys; u={'K':1<<10,'M':1<<20,'G':1<<30}; s=sys.argv[1]; print(int(s[:-1])*u[s[-1]] if s[-1] in u else int(s))" "$1"; }
budget=$(bytes "$memory")

mkdir -p "$(dirname "$device")"
swapfile="$(dirname "$device")/kernel-compare.swap"
cgroup=""
cleanup() {
    swapoff "$swapfile" 2>/dev/null || true
    rm -f "$swapfile"
    if [ -n "$cgroup" ] && [ -d "$cgroup" ]; then rmdir "$cgroup" 2>/dev/null || true; fi
}
trap cleanup EXIT

echo "== kernel swap: swap file $swapfile, memory cgroup limit $memory"
swap_bytes=$(( $(bytes "$wss") + (1 << 30) ))
fallocate -l "$swap_bytes" "$swapfile" 2>/dev/null || dd if=/dev/zero of="$swapfile" bs=1M count=$((swap_bytes >> 20)) status=none
chmod 600 "$swapfile"
mkswap -q "$swapfile" >/dev/null
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    parent=/sys/fs/cgroup$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup)
    cgroup="$parent/znswap-kernel-$$"
    mkdir "$cgroup"
    echo "$budget" > "$cgroup/memory.max"
else
    parent=/sys/fs/cgroup/memory$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
    cgroup="$parent/znswap-kernel-$$"
    mkdir "$cgroup"
    echo "$budget" > "$cgroup/memory.limit_in_bytes"
    echo 60 > "$cgroup/memory.swappiness" 2>/dev/null || true
fi
echo "== znswap on $device (same file system)"
# A device file with twice the working set (62 MiB of 64 MiB zones writable).
zones=$(( ($(bytes "$wss") * 2 + (62 << 20) - 1) / (62 << 20) ))

kernel_runs=() znswap_runs=()
for round in $(seq 1 "$rounds"); do
    echo "== round $round of $rounds: kernel swap" >&2
    swapon "$swapfile"
    # Flush the page cache so neither side starts with the other's leftovers.
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    kernel_runs+=("$(sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cgroup" \
        "$znswap" bench --kernel-swap --workload "$workload" --memory "$memory" --wss "$wss" \
        --threads "$threads" --seconds "$seconds" --json)")
    swapoff "$swapfile"
    echo "== round $round of $rounds: znswap" >&2
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    "$znswap" device create --device "$device" --zones "$zones" --zone-size 64M --zone-capacity 62M --force >/dev/null
    znswap_runs+=("$(ZNSWAP_DEVICE="$device" "$znswap" bench --workload "$workload" --memory "$memory" \
        --wss "$wss" --threads "$threads" --seconds "$seconds" --json)")
done
as_list() { python3 -c 'import json, sys; print(json.dumps([json.loads(a) for a in sys.argv[1:]]))' "$@"; }
kernel_json=$(as_list "${kernel_runs[@]}")
znswap_json=$(as_list "${znswap_runs[@]}")

python3 - "$kernel_json" "$znswap_json" <<'PY'
import json, statistics, sys
kernels, znswaps = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rows = [("ops/s", "ops_per_s"), ("swap-in MiB/s", "swap_in_mib_s"), ("swap-out MiB/s", "swap_out_mib_s"),
        ("fault p50 µs", "fault_p50_us"), ("fault p99 µs", "fault_p99_us")]
def median(runs, key):
    return statistics.median(run[key] for run in runs)
# The disk's speed drifts within minutes here: the spread of the per-round ratios says
# how far one figure can be trusted.
print(f"{'measure':<16}{'kernel':>12}{'znswap':>12}{'znswap/kernel':>16}{'rounds min-max':>17}"
      f"  (medians of {len(kernels)} rounds; ratio: median of per-round ratios)")
for name, key in rows:
    ratios = [z[key] / k[key] for k, z in zip(kernels, znswaps) if k[key]]
    ratio = statistics.median(ratios) if ratios else float("nan")
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
    print(f"{name:<16}{median(kernels, key):>12.1f}{median(znswaps, key):>12.1f}{ratio:>16.2f}{spread:>17}")
corrupted = sum(r["corrupted"] for r in kernels + znswaps)
print(f"verified pages: kernel {sum(r['pages_verified'] for r in kernels)}, znswap "
      f"{sum(r['pages_verified'] for r in znswaps)}, corrupted {corrupted}")
print(json.dumps({"kernel": kernels, "znswap": znswaps}))
sys.exit(1 if corrupted else 0)
PY
