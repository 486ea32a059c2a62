#!/usr/bin/env bash
# Agent footprint: resident memory and CPU time of each idle agent (and its fencing process) in a 3-node
# cluster started by `tenure demo` (etcd, loop_wait 1 s), sampled after a warm-up. RSS is split into its
# anonymous part (heap, stacks, relocated data) and its file-backed part (pages of the binary and libc).
# Usage: bench/footprint.sh [seconds=120]. Needs root or postgres, etcd, PostgreSQL 15.
set -euo pipefail
SECS=${1:-120}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" --bin tenure --bin tenure-fencer
BIN=$ROOT/target/release/tenure
"$BIN" demo >/tmp/tenure-footprint.log 2>&1 &
DEMO=$!
trap 'kill -INT $DEMO 2>/dev/null; wait $DEMO 2>/dev/null || true' EXIT
sleep 30
# The demo's processes only (other clusters on the host run fencers too): pid, RSS, its anonymous and
# file-backed parts (kB), CPU ticks, command line.
snap() { for p in $(pgrep -f "^$BIN agent|^tenure fencer --file /tmp/tenure-demo-"); do
  awk -v p="$p" '/^VmRSS/ {rss=$2} /^RssAnon/ {anon=$2} /^RssFile/ {file=$2} END {printf "%s %d %d %d", p, rss, anon, file}' "/proc/$p/status"
  echo " $(awk '{print $14 + $15}' "/proc/$p/stat") $(tr '\0' ' ' </proc/$p/cmdline | cut -c1-60)"; done; }
before=$(snap); sleep "$SECS"; after=$(snap)
hz=$(getconf CLK_TCK)
echo "$after" | while read -r pid rss anon file ticks cmd; do
  t0=$(echo "$before" | awk -v p="$pid" '$1 == p {print $5}')
  cpu=$(awk -v a="$ticks" -v b="${t0:-0}" -v hz="$hz" -v s="$SECS" 'BEGIN {printf "%.2f", 100 * (a - b) / hz / s}')
  cpu_s_min=$(awk -v a="$ticks" -v b="${t0:-0}" -v hz="$hz" -v s="$SECS" 'BEGIN {printf "%.3f", 60 * (a - b) / hz / s}')
  case $cmd in *fencer*) what=fencer ;; *) what=agent ;; esac
  echo "$what: rss ${rss} kB (anon ${anon}, file ${file}), cpu ${cpu} % = ${cpu_s_min} s/min over ${SECS} s: $cmd"
done
