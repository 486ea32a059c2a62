#!/usr/bin/env bash
# Write-unavailability of a host crash and of a graceful primary stop, as a client writing through a
# multi-host URL with target_session_attrs=read-write sees it; and acknowledged writes missing afterwards.
# Usage: bench/failover.sh [runs=5] [kinds="crash stop switchover"]. Needs root (runs PostgreSQL and
# agents as postgres), etcd, PostgreSQL 15.
set -euo pipefail
RUNS=${1:-5}
KINDS=${2:-crash stop switchover}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" --bin tenure --example failover_writer
BIN=$ROOT/target/release/tenure
WRITER=$ROOT/target/release/examples/failover_writer
W=$(mktemp -d /tmp/tenure-bench.XXXXXX)
chown postgres:postgres "$W"
cleanup() {
  pkill -TERM -f "$BIN agent --config $W/" 2>/dev/null || true
  sleep 3
  pkill -KILL -f "$BIN agent --config $W/" 2>/dev/null || true
  for d in "$W"/data*; do [ -f "$d/postmaster.pid" ] && kill -9 "$(head -1 "$d/postmaster.pid")" 2>/dev/null || true; done
  pkill -f "$BIN fencer --file $W/" 2>/dev/null || true
  [ -f "$W/etcd.pid" ] && kill "$(cat "$W/etcd.pid")" 2>/dev/null || true
  sleep 1; if [ -n "${KEEP:-}" ]; then echo "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EP=$(free_port); EPP=$(free_port)
runuser -u postgres -- /usr/bin/etcd --data-dir "$W/etcd" --listen-client-urls "http://127.0.0.1:$EP" \
  --advertise-client-urls "http://127.0.0.1:$EP" --listen-peer-urls "http://127.0.0.1:$EPP" >"$W/etcd.log" 2>&1 &
echo $! >"$W/etcd.pid"
declare -a PGP API
for i in 1 2 3; do
  PGP[$i]=$(free_port); API[$i]=$(free_port)
  cat >"$W/pg$i.yml" <<EOY
scope: bench
name: pg$i
restapi: {listen: "127.0.0.1:${API[$i]}", connect_address: "127.0.0.1:${API[$i]}", allow_unauthenticated: true}
etcd3: {host: "127.0.0.1:$EP"}
bootstrap: {dcs: {ttl: 10, loop_wait: 1, retry_timeout: 2}}
postgresql:
  data_dir: $W/data$i
  bin_dir: /usr/lib/postgresql/15/bin
  listen: 127.0.0.1:${PGP[$i]}
  connect_address: 127.0.0.1:${PGP[$i]}
  pgpass: $W/pgpass$i
  authentication: {superuser: {username: postgres, password: secret}, replication: {username: replicator, password: rsecret}}
tenure: {fence_budget: 1}
watchdog: {mode: "off"}
EOY
done
chown -R postgres:postgres "$W"
start_agent() { runuser -u postgres -- "$BIN" agent --config "$W/pg$1.yml" >>"$W/agent$1.log" 2>&1 & }
for i in 1 2 3; do start_agent $i; done
sql() { PGPASSWORD=secret psql -h 127.0.0.1 -p "${PGP[$1]}" -U postgres -Atc "$2" 2>/dev/null; }
primary() { for i in 1 2 3; do [ "$(sql $i 'select pg_is_in_recovery()')" = f ] && echo $i && return; done; }
healthy() { local n=0; for i in 1 2 3; do [ "$(sql $i 'select pg_is_in_recovery()')" = t ] && n=$((n+1)); done; [ "$n" = 2 ] && [ -n "$(primary)" ]; }
for _ in $(seq 1 120); do healthy && break; sleep 1; done
P=$(primary); sql "$P" "CREATE TABLE IF NOT EXISTS bench(id bigint primary key)" >/dev/null
URL="host=127.0.0.1,127.0.0.1,127.0.0.1 port=${PGP[1]},${PGP[2]},${PGP[3]} user=postgres password=secret dbname=postgres target_session_attrs=read-write connect_timeout=1"
measure() { # $1 = crash | stop ; prints "<gap_ms> <missing>"
  local run=$1 kind=$2 P; P=$(primary)
  local first=$((run * 1000000))
  "$WRITER" "$URL" 35 "$first" >"$W/acks.$kind.$run" &
  local wpid=$!; sleep 5
  local apid; apid=$(pgrep -f "^$BIN agent --config $W/pg$P.yml")
  local t0; t0=$(date +%s%3N)
  case $kind in
    crash) kill -9 "$apid"; kill -9 "$(head -1 "$W/data$P/postmaster.pid")" ;;
    stop) kill -TERM "$apid" ;;
    switchover)
      local C=$(( P % 3 + 1 ))
      curl -s -o /dev/null -H 'Content-Type: application/json' \
        -d "{\"leader\": \"pg$P\", \"candidate\": \"pg$C\"}" "http://127.0.0.1:${API[$P]}/switchover"
      # When the old primary streams from the new one again (first 'streaming' sample, every 20 ms).
      ( for _ in $(seq 1 1000); do
          [ "$(sql "$P" "select status from pg_stat_wal_receiver")" = streaming ] && { date +%s%3N >"$W/streams.$run"; break; }
          sleep 0.02
        done ) >/dev/null 2>&1 & ;;
  esac
  wait $wpid || true
  local N; N=$(primary)
  # The longest pause between consecutive acknowledgements from just before the fault on.
  local gap; gap=$(awk -v t0="$t0" '$1 >= t0 - 1000 { if (prev && $1 - prev > max) { max = $1 - prev; end = $1 }; prev = $1 } END {print max + 0}' "$W/acks.$kind.$run")
  if [ "$kind" = switchover ]; then
    # Streaming again, counted from the first write acknowledged by the new primary.
    local back; back=$(awk -v t0="$t0" '$1 >= t0 - 1000 { if (prev && $1 - prev > max) { max = $1 - prev; end = $1 }; prev = $1 } END {printf "%.0f\n", end}' "$W/acks.$kind.$run")
    local s; s=$(cat "$W/streams.$run" 2>/dev/null || echo 0)
    [ "$s" != 0 ] && echo "$((s - back))" >>"$W/streaming" || echo "never" >>"$W/streaming"
  fi
  local acked; acked=$(wc -l <"$W/acks.$kind.$run")
  local present; present=$(sql "$N" "select count(*) from bench where id >= $first and id < $((first + 1000000))")
  echo "$gap $((acked - present))"
  [ "$kind" = switchover ] || start_agent "$P"
  for _ in $(seq 1 120); do healthy && break; sleep 1; done
}
for kind in $KINDS; do
  for r in $(seq 1 "$RUNS"); do
    case $kind in crash) id=$r ;; stop) id=${r}0 ;; *) id=${r}00 ;; esac
    res=$(measure "$id" "$kind")
    echo "$kind run $r: write gap ${res% *} ms, acknowledged writes missing: ${res#* }"
    echo "$kind ${res}" >>"$W/results"
  done
done
for kind in $KINDS; do
  awk -v k="$kind" '$1 == k {print $2}' "$W/results" | sort -n | awk -v k="$kind" '{a[NR]=$1} END {printf "%s: median %d ms, max %d ms over %d runs\n", k, a[int((NR+1)/2)], a[NR], NR}'
  awk -v k="$kind" '$1 == k {m += $3} END {printf "%s: acknowledged writes missing in total: %d\n", k, m}' "$W/results"
done
if [ -f "$W/streaming" ]; then
  sort -n "$W/streaming" | awk '{a[NR]=$1} END {printf "switchover: old primary streaming again, after the first write on the new primary: median %s ms, max %s ms over %d runs\n", a[int((NR+1)/2)], a[NR], NR}'
fi
echo "timing: ttl 10 s, loop_wait 1 s, retry_timeout 2 s, etcd lease TTL 10 s"
