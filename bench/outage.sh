#!/usr/bin/env bash
# Store outage: etcd frozen with SIGSTOP for a while, then resumed. Prints when the primary stopped
# accepting writes (its fence), whether any other node became writable meanwhile, and how long after the
# store came back the cluster had one writable primary again that answers GET /primary with 200.
# Failsafe mode is on by default (issue 30): with every member reachable the primary should never be fenced.
# Issue 30's case: TTL=10 LOOP_WAIT=1 RETRY=4 bench/outage.sh 5 60.
# Usage: bench/outage.sh [runs=5] [outage_s=30]. Needs root (runs PostgreSQL and agents as postgres),
# etcd, PostgreSQL 15.
set -euo pipefail
RUNS=${1:-5}
OUTAGE_S=${2:-30}
source "$(dirname "$0")/cluster.sh"
ETCD=$(pgrep -f "^/usr/bin/etcd --data-dir $W/etcd")
now_ms() { date +%s%3N; }
writable() { local out=""; for i in 1 2 3; do [ "$(sql $i 'select pg_is_in_recovery()')" = f ] && out="$out $i"; done; echo "$out"; }
api_primary() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${API[$1]}/primary"; }
for r in $(seq 1 "$RUNS"); do
  for _ in $(seq 1 120); do healthy && break; sleep 1; done
  P=$(primary)
  t0=$(now_ms)
  kill -STOP "$ETCD"
  fenced="" others=""
  while [ $(( $(now_ms) - t0 )) -lt $((OUTAGE_S * 1000)) ]; do
    w=$(writable)
    [ -z "$fenced" ] && ! [[ " $w " == *" $P "* ]] && fenced=$(( $(now_ms) - t0 ))
    for i in $w; do [ "$i" != "$P" ] && others="$others $i"; done
    sleep 0.2
  done
  kill -CONT "$ETCD"
  t1=$(now_ms)
  conv=""
  while [ $(( $(now_ms) - t1 )) -lt 120000 ]; do
    w=$(writable)
    if [ "$(echo $w | wc -w)" = 1 ] && [ "$(api_primary $w)" = 200 ]; then conv=$(( $(now_ms) - t1 )); break; fi
    sleep 0.05
  done
  echo "run $r: primary pg$P fenced ${fenced:-never} ms into the outage; other nodes writable during it: ${others:-none}; one primary (pg${w// /}) ${conv:-never} ms after the store returned"
  echo "${conv:-999999} ${fenced:-999999}" >>"$W/outage"
done
sort -n "$W/outage" | awk '{a[NR]=$1} END {printf "converged after the outage: median %d ms, max %d ms over %d runs\n", a[int((NR+1)/2)], a[NR], NR}'
sort -n -k2 "$W/outage" | awk '{a[NR]=$2} END {printf "primary fenced into the outage: median %d ms, max %d ms\n", a[int((NR+1)/2)], a[NR]}'
echo "outage ${OUTAGE_S} s; timing: ttl ${TTL:-10} s, loop_wait ${LOOP_WAIT:-1} s, retry_timeout ${RETRY:-2} s, etcd lease TTL ${TTL:-10} s; failsafe_mode: default (on)"
