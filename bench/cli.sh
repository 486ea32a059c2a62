#!/usr/bin/env bash
# The operator's read commands, tenure's beside patronictl's, against the same keys in the same etcd: a
# three-member cluster's keys as Patroni writes them (put with etcdctl), then each command run RUNS times.
# Prints the median and the slowest wall time in ms and the peak resident memory in MB of each command.
# Usage: bench/cli.sh [runs]   (default 20; NO_BUILD=1 uses target/release/tenure as it is)
set -euo pipefail
source "$(dirname "$0")/etcd.sh"
RUNS=${1:-20}
export ETCDCTL_API=3
ctl() { etcdctl --endpoints "127.0.0.1:$EP" "$@" >/dev/null; }
for _ in $(seq 50); do ctl endpoint health 2>/dev/null && break; sleep 0.2; done

P=/service/bench
member() { # member NAME HOST ROLE STATE LSN
  printf '{"conn_url":"postgres://%s:5432/postgres","api_url":"http://%s:8008/patroni","state":"%s","role":"%s","version":"4.0.4","xlog_location":%s,"receive_lsn":%s,"replay_lsn":%s,"replication_state":"streaming","timeline":3,"tags":{"zone":"a"}}' \
    "$2" "$2" "$4" "$3" "$5" "$5" "$5" | ctl put "$P/members/$1"
}
ctl put "$P/initialize" 7268000000000000001
ctl put "$P/config" '{"ttl":30,"loop_wait":10,"retry_timeout":10,"maximum_lag_on_failover":1048576,"postgresql":{"use_pg_rewind":true,"parameters":{"hot_standby":"on","max_connections":100,"work_mem":"4MB"}}}'
ctl put "$P/leader" pg1
ctl put "$P/status" '{"optime":50331744}'
ctl put "$P/history" '[[1,25165984,"no recovery target specified","2026-11-30T12:00:00+00:00","pg1"],[2,50331744,"no recovery target specified","2026-12-01T12:00:00+00:00","pg1"]]'
member pg1 127.0.0.11 primary running 50331744
member pg2 127.0.0.12 replica streaming 47185920
member pg3 127.0.0.13 replica streaming 50331744

cat >"$W/patronictl.yml" <<EOY
scope: bench
namespace: /service/
etcd3: {hosts: "127.0.0.1:$EP"}
EOY
node_config 1 bench "ttl: 30"

# measure LABEL CMD...: RUNS runs; median and max wall ms, max RSS MB.
measure() {
  local label=$1; shift
  local walls=() rss=0
  "$@" >"$W/out" 2>"$W/err" || { echo "$label failed:"; cat "$W/err"; exit 1; }
  for _ in $(seq "$RUNS"); do
    local t0 t1 kb
    t0=$(date +%s%N)
    kb=$(/usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1)
    t1=$(date +%s%N)
    walls+=($(((t1 - t0) / 1000000)))
    [ "$kb" -gt "$rss" ] && rss=$kb
  done
  printf '%s\n' "${walls[@]}" | sort -n | awk -v l="$label" -v r="$rss" \
    '{a[NR]=$1} END {printf "%-32s median %5d ms  max %5d ms  peak RSS %5.1f MB\n", l, a[int((NR+1)/2)], a[NR], r/1024}'
}

echo "bench/cli.sh: $RUNS runs each, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "tenure $(git -C "$ROOT" rev-parse --short HEAD) (release), patronictl $(dpkg-query -W -f '${Version}' patroni)"
for fmt in pretty json; do
  measure "tenure list -f $fmt" "$BIN" list -f "$fmt" --config "$W/pg1.yml"
  measure "patronictl list -f $fmt" patronictl -c "$W/patronictl.yml" list bench -f "$fmt"
done
measure "tenure show-config" "$BIN" show-config --config "$W/pg1.yml"
measure "patronictl show-config" patronictl -c "$W/patronictl.yml" show-config bench
measure "tenure history -f tsv" "$BIN" history -f tsv --config "$W/pg1.yml"
measure "patronictl history -f tsv" patronictl -c "$W/patronictl.yml" history bench -f tsv
if ! diff <("$BIN" show-config --config "$W/pg1.yml") <(patronictl -c "$W/patronictl.yml" show-config bench) >/dev/null; then
  echo "note: show-config differs from patronictl's"
fi
