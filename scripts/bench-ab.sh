#!/usr/bin/env bash
# A/B of two znswap binaries: the same `znswap bench` workloads, alternating which runs
# first in each round (a disk may drift 2x within minutes), then a table of the
# per-round ratios B/A and their median. Put the device in RAM to see the pager's own
# cost without the disk: ZNSWAP_DEVICE=/dev/shm/ab.zns.
#
#   scripts/bench-ab.sh A_BINARY B_BINARY [ROUNDS] [SECONDS]
set -euo pipefail
if [[ $# -lt 2 ]]; then
    echo "usage: $0 A_BINARY B_BINARY [ROUNDS (3)] [SECONDS per run (15)]" >&2
    exit 2
fi
A=$1; B=$2; ROUNDS=${3:-3}; SECONDS_PER_RUN=${4:-15}
export ZNSWAP_DEVICE=${ZNSWAP_DEVICE:-/tmp/znswap-ab/default.zns}
mkdir -p "$(dirname "$ZNSWAP_DEVICE")"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
WORKLOADS=(
    "anon-w-rand 1t|--workload anon-w-rand --memory 512M --wss 2G --threads 1 --seconds $SECONDS_PER_RUN"
    "anon-w-rand 2t|--workload anon-w-rand --memory 512M --wss 2G --threads 2 --seconds $SECONDS_PER_RUN"
    "hotspot 1t|--workload hotspot --memory 512M --wss 2G --threads 1 --seconds $SECONDS_PER_RUN"
    "pmbench 2t|--workload pmbench --memory 512M --wss 2G --threads 2 --seconds $SECONDS_PER_RUN"
    "anon-w-seq|--workload anon-w-seq --memory 512M --wss 3G --threads 1 --ops 786432"
)
for round in $(seq 1 "$ROUNDS"); do
    for entry in "${WORKLOADS[@]}"; do
        name=${entry%%|*}; args=${entry#*|}
        if (( round % 2 )); then order="A B"; else order="B A"; fi
        for which in $order; do
            binary=$A; [[ $which == B ]] && binary=$B
            echo "round $round: $name on $which" >&2
            # shellcheck disable=SC2086
            "$binary" bench $args --ceiling-seconds 1 --json 2>/dev/null \
                | python3 -c "import json,sys; r=json.load(sys.stdin); print(json.dumps({'round': $round, 'workload': '$name', 'binary': '$which', 'result': r}))" >> "$OUT"
        done
    done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
runs = {}
for row in rows:
    runs.setdefault((row["workload"], row["round"]), {})[row["binary"]] = row["result"]
print("| workload | figure | A per round | B per round | B/A per round | median B/A |")
print("|---|---|---|---|---|---|")
for workload in dict.fromkeys(row["workload"] for row in rows):
    pairs = [runs[key] for key in sorted(runs) if key[0] == workload and len(runs[key]) == 2]
    for figure in ["ops_per_s", "swap_out_mib_s", "fault_p50_us", "fault_p99_us", "corrupted"]:
        a = [pair["A"][figure] for pair in pairs]
        b = [pair["B"][figure] for pair in pairs]
        ratios = [y / x for x, y in zip(a, b) if x]
        show = lambda values: ", ".join(f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}" for v in values)
        median = f"{statistics.median(ratios):.2f}" if ratios else "-"
        print(f"| {workload} | {figure} | {show(a)} | {show(b)} | {show(ratios)} | {median} |")
PY
