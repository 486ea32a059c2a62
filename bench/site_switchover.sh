#!/usr/bin/env bash
# Planned site switchover (issue 32: demote-cluster / promote-cluster): two sites on loopback as in e2e_standby
# (each its own etcd, two agents and PostgreSQL 15 servers; site B a standby cluster of site A; peer_sites naming
# each other), a writer inserting one row per transaction through one connection to whichever node is writable,
# a sampler of pg_is_in_recovery() on all four nodes every 100 ms. RUNS times (default 3): A -> B
# (`demote-cluster --force --host --port` on A, `promote-cluster --token` on B), then back B -> A.
# Prints per switchover the longest window with no writable node (sampler), the writer's longest pause between
# acknowledgements, and the two CLI commands' time; then acknowledged writes lost, and median/max.
# Runs the ignored test `bench_site_switchover` of tests/e2e/site_switchover.rs (its harness) on the release build.
# Timing: ttl 10 s, loop_wait 1 s, retry_timeout 2 s, fence_budget 1 s (the e2e harness's).
# Usage: bench/site_switchover.sh [runs=3]. Needs root (runs PostgreSQL and agents as postgres), etcd, PostgreSQL 15.
# Then (PATRONI=0 skips it) the same with Patroni 3.0.2 (bench_patroni_site_switchover; same ttl, loop_wait, retry_timeout),
# switched over the only way 3.0.2 has (demote-cluster is Patroni 4.1's): `patronictl edit-config --set
# standby_cluster.host/port` on the primary site, then, once its leader answers as a standby leader,
# `--set standby_cluster=null` on the other; its "commands and waits" time runs from the first edit to a writable new primary.
set -euo pipefail
cd "$(dirname "$0")/.."
export SITE_SWITCHOVER_RUNS=${1:-3}
echo "site switchover bench: $SITE_SWITCHOVER_RUNS runs of A -> B and back, $(nproc) cores, $(date -u +%FT%TZ), $(git rev-parse --short HEAD)"
cargo test --release --quiet --test e2e_site_switchover --no-run
run() { # run TEST: its `bench:` lines; the log's tail if it fails
  local log rc=0
  log=$(mktemp /tmp/tenure-site-switchover.XXXXXX.log)
  cargo test --release --quiet --test e2e_site_switchover -- --ignored --exact "site_switchover_bench::$1" \
    --nocapture --test-threads=1 >"$log" 2>&1 || rc=$?
  grep '^bench:' "$log" | sed 's/^bench: //' || true
  if [ "$rc" != 0 ]; then tail -60 "$log"; echo "$1 failed (exit $rc); the whole log: $log"; return "$rc"; fi
  rm -f "$log"
}
run bench_site_switchover
[ "${PATRONI:-1}" = 0 ] || run bench_patroni_site_switchover
echo "timing: ttl 10 s, loop_wait 1 s, retry_timeout 2 s, fence_budget 1 s"
