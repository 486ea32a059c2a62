#!/usr/bin/env bash
# Instructions per idle cycle (issue 14 item 1): a 3-node cluster on etcd (bench/cluster.sh: release build,
# ttl 10, loop_wait 1, retry_timeout 2); two replicas' agents are restarted under
# `valgrind --tool=callgrind --instr-atstart=no`, a switchover makes one of them the primary, and after a
# settle both are instrumented for SECS seconds of idle. Prints instructions (Ir) per cycle for the primary
# and the replica, and the top functions by inclusive cost (callgrind_annotate). Valgrind hides SHA-NI
# from the program (its CPUID), so SHA-256 runs in software under it: see bench/README.md.
# Usage: bench/callgrind_idle.sh [seconds=60]. Needs root, etcd, PostgreSQL 15, valgrind.
set -euo pipefail
SECS=${1:-60}
source "$(dirname "$0")/cluster.sh"
P=$(primary); R=$(( P % 3 + 1 )); Q=$(( R % 3 + 1 ))
agent_pid() { pgrep -f "^$BIN agent --config $W/pg$1.yml" || true; }
for i in $R $Q; do
  a=$(agent_pid "$i"); kill -TERM "$a"
  for _ in $(seq 1 100); do kill -0 "$a" 2>/dev/null || break; sleep 0.1; done
  runuser -u postgres -- env USER=postgres HOST=bench valgrind --tool=callgrind --instr-atstart=no \
    --vgdb-prefix="$W/vgdb" --callgrind-out-file="$W/cg.$i.out" \
    "$BIN" agent --config "$W/pg$i.yml" >>"$W/agent$i.log" 2>&1 &
done
# The valgrind process itself, not the runuser in front of it (both carry the command line).
vpid() { for p in $(pgrep -f "valgrind.*--callgrind-out-file=$W/cg.$1.out"); do
  [ "$(cat "/proc/$p/comm")" != runuser ] && echo "$p" && return; done; }
for _ in $(seq 1 180); do healthy && break; sleep 1; done
curl -s -o /dev/null -H 'Content-Type: application/json' \
  -d "{\"leader\": \"pg$P\", \"candidate\": \"pg$R\"}" "http://127.0.0.1:${API[$P]}/switchover"
for _ in $(seq 1 120); do [ "$(primary)" = "$R" ] && healthy && break; sleep 1; done
[ "$(primary)" = "$R" ] || { echo "switchover to pg$R did not happen" >&2; exit 1; }
sleep 20
# vgdb names its pipes after the user and host in its environment: the same as valgrind's.
cgc() { runuser -u postgres -- env USER=postgres HOST=bench callgrind_control --vgdb-prefix="$W/vgdb" "$@"; }
for i in $R $Q; do cgc -i on "$(vpid "$i")" >/dev/null; done
sleep "$SECS"
for i in $R $Q; do cgc --dump "$(vpid "$i")" >/dev/null; cgc -i off "$(vpid "$i")" >/dev/null; done
sleep 2
# Calls of `name` in callgrind files: `cfn=(id) name` names a callee once, `cfn=(id)` refers to it after.
calls() { local pat=$1; shift; awk -v pat="$pat" '
  /^cfn=/ { id = $1; sub(/^cfn=/, "", id); n = $0; sub(/^cfn=\([0-9]+\) ?/, "", n); if (n != "") name[id] = n; cur = name[id]; next }
  /^calls=/ && index(cur, pat) { split($1, c, "="); total += c[2] }
  { if ($0 !~ /^calls=/) cur = "" }
  END { print total + 0 }' "$@"; }
echo "date $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), ${SECS} s instrumented"
# decide() is inlined in the release build, so cycles are counted by their rate at loop_wait 1 s: two a
# second on the leader (renew, then absorb the renewal), one on a replica.
for i in $R $Q; do
  [ "$i" = "$R" ] && { role=primary; per_s=2; } || { role=replica; per_s=1; }
  files=$(ls "$W"/cg.$i.out* | grep -v '\.out$' || ls "$W/cg.$i.out")
  ir=$(callgrind_annotate $files 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')
  scram=$(calls "postgres_protocol::authentication::sasl::hi" $files)
  echo "$role pg$i: Ir ${ir} in ${SECS} s, $(awk -v a="$ir" -v s="$SECS" -v r="$per_s" 'BEGIN {printf "%.0f", a / s / r}') per cycle at ${per_s}/s; SCRAM key derivations ${scram} (one per probe, one probe per cycle: $(awk -v a="$ir" -v n="$scram" 'BEGIN { if (n > 0) printf "%.0f", a / n; else print "?" }') per probe)"
  callgrind_annotate --inclusive=yes $files 2>/dev/null | sed -n '/file:function/,$p' | awk 'NR <= 25'
done
