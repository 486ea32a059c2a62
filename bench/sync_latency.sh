#!/usr/bin/env bash
# Commit latency with and without synchronous replication, side by side in one run on one cluster: pgbench
# (a few clients, simple-update transactions) against the primary with synchronous_mode off, then on (PATCH
# /config, once a standby is listed in the sync key), then strict. Usage: bench/sync_latency.sh [seconds=20]
# [clients=4]. Needs root (runs PostgreSQL and agents as postgres), etcd, PostgreSQL 15 and pgbench.
set -euo pipefail
SECS=${1:-20}
CLIENTS=${2:-4}
source "$(dirname "$0")/cluster.sh"
P=$(primary)
PGB=/usr/lib/postgresql/15/bin/pgbench
run() { # $1 = label
  local out; out=$(PGPASSWORD=secret "$PGB" -h 127.0.0.1 -p "${PGP[$P]}" -U postgres -N -c "$CLIENTS" -j 2 -T "$SECS" -r postgres 2>&1)
  local tps lat; tps=$(awk '/^tps = /{printf "%.0f", $3}' <<<"$out"); lat=$(awk '/^latency average = /{print $4}' <<<"$out")
  echo "$1: $tps tps, latency average $lat ms (clients $CLIENTS, $SECS s, pgbench -N)"
}
patch() { curl -s -o /dev/null -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' -d "$1" "http://127.0.0.1:${API[$P]}/config"; }
PGPASSWORD=secret "$PGB" -h 127.0.0.1 -p "${PGP[$P]}" -U postgres -i -s 10 -q postgres >/dev/null 2>&1
sleep 2
run "synchronous_mode off"
[ "$(patch '{"synchronous_mode": true}')" = 200 ]
for _ in $(seq 1 60); do sync_listed && break; sleep 0.5; done
sync_listed || { echo "no standby listed in the sync key after 30 s" >&2; exit 1; }
run "synchronous_mode on"
[ "$(patch '{"synchronous_mode_strict": true}')" = 200 ]
sleep 2
run "synchronous_mode on, strict"
[ "$(patch '{"synchronous_mode": false, "synchronous_mode_strict": false}')" = 200 ]
for _ in $(seq 1 60); do sync_listed || break; sleep 0.5; done
run "synchronous_mode off again"
echo "machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GB", $2/1048576}' /proc/meminfo); PostgreSQL 15 and etcd on loopback; $(date -u +%F)"
