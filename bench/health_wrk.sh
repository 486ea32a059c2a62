#!/usr/bin/env bash
# Health checks under wrk (issue 14 item 6): a 3-node cluster on etcd (bench/cluster.sh: release build,
# ttl 10, loop_wait 1, retry_timeout 2), then `wrk --latency` against GET /primary and GET /replica?lag=1MB
# on the primary and on a replica, with 10 and 64 connections; prints req/s, p50, p99 and the non-2xx
# count (a replica answers /primary with 503, the primary /replica with 503: both are health answers).
# Then the same runs against one Patroni 3.0.2 node on the same etcd (PATRONI=0 leaves it out).
# Usage: bench/health_wrk.sh [seconds=10] [threads=2]. Needs root, etcd, PostgreSQL 15, wrk (apt-get install wrk), patroni.
set -euo pipefail
SECS=${1:-10}
THREADS=${2:-2}
command -v wrk >/dev/null || { echo "wrk not installed: apt-get install -y wrk" >&2; exit 1; }
source "$(dirname "$0")/cluster.sh"
P=$(primary)
R=$(( P % 3 + 1 ))
# The replica answers /replica 200 once its agent has published it streaming.
for _ in $(seq 1 60); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${API[$R]}/replica?lag=1MB")" = 200 ] && break
  sleep 1
done
echo "date $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), wrk -t$THREADS -d${SECS}s --latency"
printf '%-8s %-18s %5s %10s %9s %9s %8s\n' node path conns req/s p50 p99 non-2xx
# One row per path and connection count: wrk against http://127.0.0.1:PORT, labelled NODE.
wrk_rows() { # wrk_rows NODE PORT
  local path c out rps p50 p99 bad
  for path in /primary '/replica?lag=1MB'; do
    for c in 10 64; do
      out=$(wrk -t"$THREADS" -c"$c" -d"${SECS}s" --latency "http://127.0.0.1:$2$path")
      rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
      p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
      p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
      bad=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
      printf '%-8s %-18s %5s %10s %9s %9s %8s\n' "$1" "$path" "$c" "$rps" "$p50" "$p99" "${bad:-0}"
    done
  done
}
wrk_rows primary "${API[$P]}"
wrk_rows replica "${API[$R]}"

# The same wrk runs against Patroni 3.0.2 (Debian's /usr/bin/patroni, as tests/e2e/patroni_harness.rs runs it)
# in the same run: one Patroni node, a cluster of its own on the same etcd, so its answers are a primary's
# (`/replica?lag=1MB` answers 503 there, as tenure's primary does). PATRONI=0 leaves it out.
[ "${PATRONI:-1}" = 0 ] && exit 0
command -v patroni >/dev/null || { echo "patroni not installed (scripts/install-deps)" >&2; exit 1; }
PPG=$(free_port); PAPI=$(free_port)
mkdir -p "$W/patroni" && chown postgres:postgres "$W/patroni"
cat >"$W/patroni.yml" <<EOY
scope: bench-patroni
namespace: /service/
name: patroni1
restapi: {listen: "127.0.0.1:$PAPI", connect_address: "127.0.0.1:$PAPI"}
etcd3: {hosts: "127.0.0.1:$EP"}
bootstrap: {dcs: {ttl: 10, loop_wait: 1, retry_timeout: 2}}
postgresql:
  listen: 127.0.0.1:$PPG
  connect_address: 127.0.0.1:$PPG
  data_dir: $W/data-patroni
  bin_dir: /usr/lib/postgresql/15/bin
  pgpass: $W/patroni/pgpass
  authentication: {superuser: {username: postgres, password: secret}, replication: {username: replicator, password: rsecret}}
  parameters: {unix_socket_directories: '$W/patroni'}
  pg_hba: [local all all trust, host all all 127.0.0.1/32 md5, host replication replicator 127.0.0.1/32 md5]
watchdog: {mode: "off"}
EOY
chown postgres:postgres "$W/patroni.yml"
runuser -u postgres -- patroni "$W/patroni.yml" >"$W/patroni.log" 2>&1 &
PATRONI_PID=$!
trap 'kill "$PATRONI_PID" 2>/dev/null; sleep 2; cleanup' EXIT
for _ in $(seq 1 90); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PAPI/primary")" = 200 ] && break
  sleep 1
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PAPI/primary")" = 200 ] ||
  { echo "Patroni did not become primary"; tail -5 "$W/patroni.log"; exit 1; }
echo "Patroni 3.0.2, one node (primary), the same etcd, load $(cut -d' ' -f1-3 /proc/loadavg)"
wrk_rows patroni "$PAPI"
