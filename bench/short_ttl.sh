#!/usr/bin/env bash
# A short ttl under stress (issue 14 item 5). Two 3-node clusters share one etcd and the same stress, side by
# side: "short" at ttl 5 s, loop_wait 1 s, retry_timeout 1 s, and "patroni" at Patroni's defaults (ttl 30,
# loop_wait 10, retry_timeout 10). For DURATION seconds (default 600) it runs, all at once:
#   - a CPU hog per core (busy shell loops at the agents' own priority);
#   - an fsync-heavy writer on the primaries' disk (dd with oflag=dsync, 8 kB blocks, in a loop), and a
#     writer inserting a row per transaction into each primary;
#   - store latency spikes: etcd frozen (SIGSTOP) for 200-500 ms, then thawed, every 1-5 s at random.
# Every second it samples which node of each cluster is writable, and its postmaster PID and timeline.
# A false failover is any change of the writable node, postmaster or timeline, or a second with no writable
# node; each is printed. Needs root (runs PostgreSQL and agents as postgres), etcd, PostgreSQL 15.
# Usage: bench/short_ttl.sh [duration_s=600]. NO_BUILD=1 uses the release binary already built.
set -euo pipefail
DURATION=${1:-600}
source "$(dirname "$0")/etcd.sh"
declare -a HOGS=()
stop_stress() { for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap 'stop_stress; cleanup' EXIT
# Nodes 1-3 are the short-ttl cluster, 4-6 the Patroni-like one.
declare -a SCOPE
for i in 1 2 3 4 5 6; do
  if [ "$i" -le 3 ]; then SCOPE[$i]=short; timing="ttl: 5, loop_wait: 1, retry_timeout: 1"
  else SCOPE[$i]=patroni; timing="ttl: 30, loop_wait: 10, retry_timeout: 10"; fi
  node_config "$i" "${SCOPE[$i]}" "$timing"
done
chown -R postgres:postgres "$W"
for i in 1 2 3 4 5 6; do runuser -u postgres -- "$BIN" agent --config "$W/pg$i.yml" >>"$W/agent$i.log" 2>&1 & done
sql() { PGPASSWORD=secret psql -h 127.0.0.1 -p "${PGP[$1]}" -U postgres -Atc "$2" 2>/dev/null; }
# "<writable node> <postmaster pid> <timeline>" of a cluster (nodes $1..$1+2), or "none".
state() {
  local found=none
  for i in $1 $(($1 + 1)) $(($1 + 2)); do
    [ "$(PGCONNECT_TIMEOUT=1 sql "$i" 'select pg_is_in_recovery()')" = f ] || continue
    local tl; tl=$(sql "$i" "select timeline_id from pg_control_checkpoint()")
    found="$i $(head -1 "$W/data$i/postmaster.pid" 2>/dev/null) $tl"
  done
  echo "$found"
}
ready() { # one writable node and two streaming replicas in cluster starting at $1
  local s; s=$(state "$1"); [ "$s" != none ] || return 1
  local p=${s%% *} n=0
  for i in $1 $(($1 + 1)) $(($1 + 2)); do
    [ "$i" = "$p" ] && continue
    [ "$(sql "$p" "select count(*) from pg_stat_replication where application_name = 'pg$i' and state = 'streaming'")" = 1 ] && n=$((n + 1))
  done
  [ "$n" = 2 ]
}
for _ in $(seq 1 180); do ready 1 && ready 4 && break; sleep 1; done
ready 1 && ready 4 || { echo "clusters did not come up"; tail -5 "$W"/agent*.log; exit 1; }
S0_short=$(state 1); S0_patroni=$(state 4)
echo "start: short ttl primary/pid/timeline: $S0_short; patroni-like: $S0_patroni"

# The stress.
for _ in $(seq 1 "$(nproc)"); do (while :; do :; done) & HOGS+=($!); done
(while :; do dd if=/dev/zero of="$W/fsync.dat" bs=8k count=2000 oflag=dsync conv=notrunc status=none; done) & HOGS+=($!)
ETCD=$(cat "$W/etcd.pid")
(while :; do
   sleep "$(awk -v r=$RANDOM 'BEGIN {printf "%.2f", 1 + 4 * r / 32768}')"
   kill -STOP "$ETCD"; sleep "$(awk -v r=$RANDOM 'BEGIN {printf "%.3f", 0.2 + 0.3 * r / 32768}')"; kill -CONT "$ETCD"
   echo x >>"$W/spikes"
 done) & HOGS+=($!)
for c in 1 4; do
  p=$(state $c); p=${p%% *}
  URL="host=127.0.0.1,127.0.0.1,127.0.0.1 port=${PGP[$c]},${PGP[$((c + 1))]},${PGP[$((c + 2))]} user=postgres password=secret dbname=postgres target_session_attrs=read-write connect_timeout=1"
  sql "$p" "CREATE TABLE IF NOT EXISTS stress(id bigserial primary key, at timestamptz default now())" >/dev/null
  (while :; do PGPASSWORD=secret psql "$URL" -qAtc "INSERT INTO stress DEFAULT VALUES" >/dev/null 2>&1 || sleep 0.1; done) & HOGS+=($!)
done

declare -A FALSE=([short]=0 [patroni]=0) NONE=([short]=0 [patroni]=0)
END=$(( $(date +%s) + DURATION ))
while [ "$(date +%s)" -lt "$END" ]; do
  for c in short patroni; do
    if [ $c = short ]; then now=$(state 1); was=$S0_short; else now=$(state 4); was=$S0_patroni; fi
    if [ "$now" = none ]; then NONE[$c]=$((NONE[$c] + 1)); echo "$(date -u +%T) $c: no writable node"
    elif [ "$now" != "$was" ]; then FALSE[$c]=$((FALSE[$c] + 1)); echo "$(date -u +%T) $c: was '$was', now '$now'"
      if [ $c = short ]; then S0_short=$now; else S0_patroni=$now; fi
    fi
  done
  sleep 1
done
for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; done
kill -CONT "$ETCD" 2>/dev/null || true
HOGS=()
echo "load average during the run: $(cut -d' ' -f1-3 /proc/loadavg); etcd freezes injected: $(wc -l <"$W/spikes")"
for c in short patroni; do
  if [ $c = short ]; then first=1; t="ttl 5 s, loop_wait 1 s, retry_timeout 1 s"; else first=4; t="ttl 30 s, loop_wait 10 s, retry_timeout 10 s"; fi
  echo "$c ($t): ${DURATION} s under stress: changes of primary/postmaster/timeline ${FALSE[$c]}, seconds with no writable node ${NONE[$c]}; now: $(state $first)"
done
