#!/usr/bin/env bash
# redis's BGSAVE under `znswap run`: the forked child must write the data set as it was
# at the fork, pages on the device included, while the client keeps overwriting it.
#
# Loads --data into a redis-server paged within --memory, takes `DEBUG DIGEST`, starts a
# BGSAVE and overwrites keys (every value checked by `znswap kv`) until the save is
# done, then loads the RDB into a plain redis-server: its digest must be the one taken
# at the fork. Exits non-zero on any difference or wrong value.
#
# With --daemon, redis is a tenant of a `znswap daemon` started here on the device (the
# child reads its parent's swapped pages from the daemon's snapshot of the fork); with
# --memcached too, a memcached is another tenant of the same daemon, loaded, run and
# swept by `znswap kv` (every value checked) while redis loads, forks and saves.
#
# Usage: scripts/redis-fork-check.sh [--data 256M] [--memory 64M] [--znswap PATH] [--device PATH] [--encrypt]
#        [--daemon [--memcached]] [--znswap-args "--park 16M --wp-async"]   (more flags for `znswap run`)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
data=256M memory=64M znswap="" device="" encrypt=() extra=() daemon=0 memcached=0
while [ $# -gt 0 ]; do
    case "$1" in
        --data) data=$2; shift ;;
        --memory) memory=$2; shift ;;
        --znswap) znswap=$2; shift ;;
        --device) device=$2; shift ;;
        --encrypt) encrypt=(--encrypt) ;;
        --daemon) daemon=1 ;;
        --memcached) memcached=1 ;;
        --znswap-args) read -ra extra <<< "$2"; shift ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
die() { echo "error: $*" >&2; exit 1; }
[ "$memcached" = 0 ] || [ "$daemon" = 1 ] || die "--memcached needs --daemon (it is a second tenant of the daemon)"
command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
    die "needs redis-server and redis-cli (apt-get install redis-server redis-tools)"
if [ -z "$znswap" ]; then
    (cd "$repo" && cargo build --release -q -p znswap -p znswap-preload)
    znswap=$repo/target/release/znswap
fi
work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
[ -n "$device" ] || device=$work/device.zns
"$znswap" device create --device "$device" --zones 32 --zone-size 64M --force >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 1 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
    die "redis on port $1 did not start"
}
port=$(free_port)
paging=(--device "$device")
if [ "$daemon" = 1 ]; then
    # The daemon has the device, --encrypt, and twice --memory (each tenant asks --memory).
    "$znswap" daemon "${encrypt[@]}" --device "$device" --memory "$(python3 -c "import sys
s = sys.argv[1]; units = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
print(2 * (int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)))" "$memory")" \
        --socket "$work/daemon.sock" 2>"$work/daemon.log" &
    pids+=($!)
    for _ in $(seq 1 100); do [ -S "$work/daemon.sock" ] && break; sleep 0.1; done
    [ -S "$work/daemon.sock" ] || die "the daemon did not start: $(cat "$work/daemon.log")"
    paging=(--daemon "$work/daemon.sock")
    encrypt=()
fi
if [ "$memcached" = 1 ]; then
    command -v memcached >/dev/null || die "--memcached needs memcached (apt-get install memcached)"
    mc_port=$(free_port)
    "$znswap" run --memory "$memory" "${paging[@]}" --tenant memcached -- \
        memcached -u root -m 1024 -p "$mc_port" -U 0 -t 2 >"$work/memcached.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$mc_port") 2>/dev/null && break; sleep 0.1; done
    # Loaded, run and swept while redis loads, forks and saves: every value checked.
    "$znswap" kv --protocol memcache --addr "127.0.0.1:$mc_port" --data "$data" --value-bytes 1000 --seconds 10 \
        --json >"$work/memcached.json" 2>"$work/memcached-kv.log" &
    mc_kv=$!
fi
"$znswap" run "${encrypt[@]}" "${extra[@]}" --memory "$memory" "${paging[@]}" --stats "$work/stats.json" -- \
    redis-server --port "$port" --save "" --appendonly no --dir "$work" --dbfilename fork.rdb \
    --enable-debug-command local >"$work/paged.log" 2>&1 &
pids+=($!)
wait_port "$port"
"$znswap" kv --protocol redis --addr "127.0.0.1:$port" --data "$data" --value-bytes 1000 --load-only >/dev/null
digest=$(redis-cli -p "$port" debug digest)
redis-cli -p "$port" bgsave >/dev/null
# Overwrite while the child writes its snapshot (every read checked).
"$znswap" kv --protocol redis --addr "127.0.0.1:$port" --data "$data" --value-bytes 1000 --no-load \
    --seconds 5 --json >"$work/overwrite.json"
for _ in $(seq 1 600); do
    [ "$(redis-cli -p "$port" info persistence | tr -d '\r' | sed -n 's/^rdb_bgsave_in_progress://p')" = 0 ] && break
    sleep 0.5
done
status=$(redis-cli -p "$port" info persistence | tr -d '\r' | sed -n 's/^rdb_last_bgsave_status://p')
if [ "$memcached" = 1 ]; then
    wait "$mc_kv" || die "znswap kv found wrong or missing values in memcached (or failed): $(tail -5 "$work/memcached-kv.log")"
    python3 - "$work/memcached.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("memcached, the other tenant: run %.0f ops/s (p99 %.0f us), %d wrong, %d missing; sweep %d keys" % (
    r["run"]["ops_per_s"], r["run"]["p99_us"], r["run"]["wrong"], r["run"]["missing"], r["sweep"]["keys"]))
assert r["run"]["wrong"] == 0 and r["run"]["missing"] == 0 and r["sweep"]["wrong"] == 0 and r["sweep"]["missing"] == 0, r
PY
fi
[ "$status" = ok ] || die "BGSAVE under znswap run failed ($status); see $work/paged.log"
after=$(redis-cli -p "$port" debug digest)
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
wait "${pids[-1]}" || true
plain=$(free_port)
redis-server --port "$plain" --save "" --appendonly no --dir "$work" --dbfilename fork.rdb \
    --enable-debug-command local >"$work/plain.log" 2>&1 &
pids+=($!)
wait_port "$plain"
for _ in $(seq 1 600); do
    [ "$(redis-cli -p "$plain" info persistence | tr -d '\r' | sed -n 's/^loading://p')" = 0 ] && break
    sleep 0.5
done
loaded=$(redis-cli -p "$plain" debug digest)
keys=$(redis-cli -p "$plain" dbsize)
python3 - "$work/overwrite.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("overwrites during the save:", json.dumps({k: r[k] for k in r if k in ("run", "sweep")}) [:300])
PY
echo "digest at the fork:   $digest"
echo "digest after writes:  $after"
echo "digest of the RDB:    $loaded ($keys keys)"
[ "$digest" != "$after" ] || die "the overwrites changed nothing: the check proves nothing"
[ "$loaded" = "$digest" ] || die "the RDB written by the forked child differs from the data at the fork"
python3 - "$work/stats.json" "${#encrypt[@]}" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
if summary.get("tenant"):
    t = summary["tenant"]
    print("paged by the daemon: %d pages swapped out, %d in" % (t["swap_outs"], t["swap_ins"]))
    sys.exit(0)
r = summary["report"]["pager"]
print("paged: %d pages swapped out, %d in, %d sealed, %d lost; %d parked, %d not movable (shared with the child), %d unshared" % (
    r["swap_outs_written"], r["swap_in_reads"], r.get("pages_sealed", 0), r["lost_pages"],
    r.get("pages_parked", 0), r.get("park_refused", 0), r.get("pages_unshared", 0)))
if sys.argv[2] != "0" and r.get("pages_sealed", 0) < r["swap_outs_written"]:
    sys.exit("error: --encrypt, but not every page swapped out was sealed")
PY
echo "ok: the RDB the forked child wrote under znswap run is the data set at the fork"
