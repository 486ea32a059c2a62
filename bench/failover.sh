#!/usr/bin/env bash
# Write-unavailability of a host crash and of a graceful primary stop, as a client writing through a
# multi-host URL with target_session_attrs=read-write sees it; and acknowledged writes missing afterwards.
# Usage: bench/failover.sh [runs=5] [kinds="crash stop switchover"]; TTL, LOOP_WAIT, RETRY as in cluster.sh, and
# WRITER_S (default 35) for how long each run's writer writes (the fault comes 5 s in). Needs root (runs PostgreSQL and
# agents as postgres), etcd, PostgreSQL 15.
set -euo pipefail
RUNS=${1:-5}
KINDS=${2:-crash stop switchover}
source "$(dirname "$0")/cluster.sh"
P=$(primary); sql "$P" "CREATE TABLE IF NOT EXISTS bench(id bigint primary key)" >/dev/null
URL="host=127.0.0.1,127.0.0.1,127.0.0.1 port=${PGP[1]},${PGP[2]},${PGP[3]} user=postgres password=secret dbname=postgres target_session_attrs=read-write connect_timeout=1"
measure() { # $1 = crash | stop ; prints "<gap_ms> <missing>"
  local run=$1 kind=$2 P; P=$(primary)
  local first=$((run * 1000000))
  "$WRITER" "$URL" "${WRITER_S:-35}" "$first" >"$W/acks.$kind.$run" &
  local wpid=$!; sleep 5
  local apid; apid=$(pgrep -f "^$BIN agent --config $W/pg$P.yml")
  local t0; t0=$(date +%s%3N)
  case $kind in
    crash) kill -9 "$apid"; kill -9 "$(head -1 "$W/data$P/postmaster.pid")"
      # What the replicas had received when the primary died (their WAL can grow no more): an acknowledged
      # id beyond all of them was never sent, which asynchronous replication loses whoever is promoted.
      sleep 0.5
      for i in 1 2 3; do
        [ "$i" = "$P" ] && continue
        sql "$i" "select coalesce(max(id), 0) from bench where id >= $first and id < $((first + 1000000))"
      done | sort -n | tail -1 >"$W/received.$run" ;;
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
  local unsent=0
  if [ -s "$W/received.$run" ]; then
    # Acknowledged by the old primary: before the fault (a failover takes seconds; 1 s of slack for the
    # backends that answered while the postmaster was being killed).
    unsent=$(awk -v r="$(cat "$W/received.$run")" -v t0="$t0" '$1 < t0 + 1000 && $2 > r' "$W/acks.$kind.$run" | wc -l)
  fi
  echo "$gap $((acked - present)) $unsent"
  [ "$kind" = switchover ] || start_agent "$P"
  for _ in $(seq 1 120); do healthy && break; sleep 1; done
}
for kind in $KINDS; do
  for r in $(seq 1 "$RUNS"); do
    case $kind in crash) id=$r ;; stop) id=${r}0 ;; *) id=${r}00 ;; esac
    res=$(measure "$id" "$kind")
    read -r gap missing unsent <<<"$res"
    echo "$kind run $r: write gap $gap ms, acknowledged writes missing: $missing (of them never received by any replica: $unsent)"
    echo "$kind ${res}" >>"$W/results"
  done
done
for kind in $KINDS; do
  awk -v k="$kind" '$1 == k {print $2}' "$W/results" | sort -n | awk -v k="$kind" '{a[NR]=$1} END {printf "%s: median %d ms, max %d ms over %d runs\n", k, a[int((NR+1)/2)], a[NR], NR}'
  awk -v k="$kind" '$1 == k {m += $3; u += $4} END {printf "%s: acknowledged writes missing in total: %d (never received by any replica before the fault: %d)\n", k, m, u}' "$W/results"
done
if [ -f "$W/streaming" ]; then
  sort -n "$W/streaming" | awk '{a[NR]=$1} END {printf "switchover: old primary streaming again, after the first write on the new primary: median %s ms, max %s ms over %d runs\n", a[int((NR+1)/2)], a[NR], NR}'
fi
echo "synchronous_mode: ${SYNC:-off}"
echo "timing: ttl ${TTL:-10} s, loop_wait ${LOOP_WAIT:-1} s, retry_timeout ${RETRY:-2} s, etcd lease TTL ${TTL:-10} s"
