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
#        [--threads N] [--seconds 30] [--device PATH]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
memory=1G wss=4G workload=anon-w-rand threads=1 seconds=30
device=${ZNSWAP_DEVICE:-$HOME/.cache/znswap/compare.zns}
while [ $# -gt 0 ]; do
    case "$1" in
        --memory) memory=$2; shift ;;
        --wss) wss=$2; shift ;;
        --workload) workload=$2; shift ;;
        --threads) threads=$2; shift ;;
        --seconds) seconds=$2; shift ;;
        --device) device=$2; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
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
swapon "$swapfile"
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
# Flush the page cache so neither side starts with the other's leftovers.
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
kernel_json=$(sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cgroup" \
    "$znswap" bench --kernel-swap --workload "$workload" --memory "$memory" --wss "$wss" \
    --threads "$threads" --seconds "$seconds" --json)
swapoff "$swapfile"; rm -f "$swapfile"

echo "== znswap on $device (same file system)"
# A device file with twice the working set (62 MiB of 64 MiB zones writable).
zones=$(( ($(bytes "$wss") * 2 + (62 << 20) - 1) / (62 << 20) ))
"$znswap" device create --path "$device" --zones "$zones" --zone-size 64M --zone-capacity 62M --force >/dev/null
znswap_json=$(ZNSWAP_DEVICE="$device" "$znswap" bench --workload "$workload" --memory "$memory" \
    --wss "$wss" --threads "$threads" --seconds "$seconds" --json)

python3 - "$kernel_json" "$znswap_json" <<'PY'
import json, sys
kernel, znswap = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rows = [("ops/s", "ops_per_s"), ("swap-in MiB/s", "swap_in_mib_s"), ("swap-out MiB/s", "swap_out_mib_s"),
        ("fault p50 µs", "fault_p50_us"), ("fault p99 µs", "fault_p99_us")]
print(f"{'measure':<16}{'kernel':>12}{'znswap':>12}{'znswap/kernel':>16}")
for name, key in rows:
    k, z = kernel[key], znswap[key]
    print(f"{name:<16}{k:>12.1f}{z:>12.1f}{(z / k if k else float('nan')):>16.2f}")
print(f"verified pages: kernel {kernel['pages_verified']} ({kernel['corrupted']} corrupted), "
      f"znswap {znswap['pages_verified']} ({znswap['corrupted']} corrupted)")
print(json.dumps({"kernel": kernel, "znswap": znswap}))
PY
