#!/usr/bin/env bash
# One program as a tenant of `znswap daemon` against the same program under in-process
# `znswap run` (issue 34's goal: at least 0.9x the ops/s): memcached or redis with
# --data of values in --memory, each checked by `znswap kv` (load, a timed run, a sweep
# of every key), on the same device, alternating which goes first round by round (a
# disk may move 2x in minutes). Prints each round's ops/s and p99 of both, their ratio, and
# the median ratio; exits non-zero on any wrong or missing value.
#
# Usage: scripts/daemon-compare.sh [--server redis|memcached] [--data 1G] [--memory 256M]
#        [--seconds 30] [--rounds 2] [--device PATH] [--znswap PATH]
#        [--server-cpus 0] [--client-cpus 1] [--json FILE]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
server=redis data=1G memory=256M seconds=30 rounds=2 device="" znswap="" server_cpus="" client_cpus="" json=""
while [ $# -gt 0 ]; do
    case "$1" in
        --server) server=$2; shift ;;
        --data) data=$2; shift ;;
        --memory) memory=$2; shift ;;
        --seconds) seconds=$2; shift ;;
        --rounds) rounds=$2; shift ;;
        --device) device=$2; shift ;;
        --znswap) znswap=$2; shift ;;
        --server-cpus) server_cpus=$2; shift ;;
        --client-cpus) client_cpus=$2; shift ;;
        --json) json=$2; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
die() { echo "error: $*" >&2; exit 1; }
case "$server" in
    redis) command -v redis-server >/dev/null || die "needs redis-server" ;;
    memcached) command -v memcached >/dev/null || die "needs memcached" ;;
    *) die "--server redis or memcached, not $server" ;;
esac
if [ -z "$znswap" ]; then
    (cd "$repo" && cargo build --release -q -p znswap -p znswap-preload)
    znswap=$repo/target/release/znswap
fi
work=$(mktemp -d)
daemon_pid="" server_pid=""
cleanup() {
    [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
    [ -z "$daemon_pid" ] || kill "$daemon_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
if [ -z "$device" ]; then
    device=$work/device.zns
    "$znswap" device create --device "$device" --zones 64 --zone-size 64M >/dev/null
fi
pin() { if [ -n "$1" ]; then echo taskset -c "$1"; fi; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
case "$server" in
    redis) command=(redis-server --port "$port" --save "" --appendonly no) protocol=redis mix=ycsb-a ;;
    memcached)
        # Its hash table at the size the load would grow it to (as kv-compare.sh sets it):
        # grown during the load, each doubling walks every item, a swap-in each.
        hashpower=$(python3 -c "import math, sys
u = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}; s = sys.argv[1]
n = int(s[:-1]) * u[s[-1]] if s[-1] in u else int(s)
print(max(16, math.ceil(math.log2(n / 180 / 1.5))))" "$data")
        command=(memcached -u root -m 4096 -p "$port" -U 0 -t 2 -o "hashpower=$hashpower") protocol=memcache mix=etc ;;
esac

one() {  # one MODE ROUND: a server paged by MODE (run or daemon), loaded, run, swept
    local mode=$1 round=$2 paging=(--device "$device")
    if [ "$mode" = daemon ]; then
        rm -f "$work/daemon.sock"
        # On the server's CPUs, where the in-process pager's threads run (they are the
        # server process's).
        $(pin "$server_cpus") "$znswap" daemon --device "$device" --memory "$memory" --socket "$work/daemon.sock" \
            2>"$work/daemon.log" &
        daemon_pid=$!
        for _ in $(seq 1 100); do [ -S "$work/daemon.sock" ] && break; sleep 0.1; done
        paging=(--daemon "$work/daemon.sock")
    fi
    $(pin "$server_cpus") "$znswap" run "${paging[@]}" --memory "$memory" -- "${command[@]}" \
        >"$work/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    $(pin "$client_cpus") "$znswap" kv --protocol "$protocol" --mix "$mix" --addr "127.0.0.1:$port" \
        --data "$data" --seconds "$seconds" --json >"$work/$mode.$round.json" 2>"$work/kv.log" ||
        die "znswap kv failed or found wrong values ($mode, round $round): $(tail -3 "$work/kv.log")"
    kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
    if [ -n "$daemon_pid" ]; then kill "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true; daemon_pid=""; fi
    echo "   $mode: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["run"]; print("%.0f ops/s, p99 %.0f us" % (r["ops_per_s"], r["p99_us"]))' "$work/$mode.$round.json")" >&2
}

for round in $(seq 1 "$rounds"); do
    echo "== round $round ($server, $data in $memory)" >&2
    if [ $((round % 2)) = 1 ]; then one run "$round"; one daemon "$round"; else one daemon "$round"; one run "$round"; fi
done

python3 - "$work" "$rounds" "$json" <<'PY'
import json, statistics, sys
work, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = []
for r in range(1, rounds + 1):
    run = json.load(open(f"{work}/run.{r}.json"))["run"]
    daemon = json.load(open(f"{work}/daemon.{r}.json"))["run"]
    for side in (run, daemon):
        assert side["wrong"] == 0 and side["missing"] == 0, side
    rows.append({"round": r, "run": run, "daemon": daemon, "ratio": daemon["ops_per_s"] / run["ops_per_s"]})
print(f"{'round':>5} | {'znswap run':^20} | {'daemon tenant':^20} | {'ratio':>5}")
print(f"{'':>5} | {'ops/s':>9} {'p99 µs':>10} | {'ops/s':>9} {'p99 µs':>10} |")
for row in rows:
    a, b = row["run"], row["daemon"]
    print(f"{row['round']:>5} | {a['ops_per_s']:>9.0f} {a['p99_us']:>10.0f} | {b['ops_per_s']:>9.0f} {b['p99_us']:>10.0f} | {row['ratio']:>5.2f}")
print(f"median ratio (daemon tenant / in-process): {statistics.median(r['ratio'] for r in rows):.2f}; 0 wrong, 0 missing")
if out:
    json.dump(rows, open(out, "w"), indent=1)
PY
