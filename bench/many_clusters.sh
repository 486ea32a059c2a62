#!/usr/bin/env bash
# One store, many clusters (issue 14 item 4): CLUSTERS three-member clusters of simulated idle members, each
# member a real store adapter running an idle agent's store calls (examples/many_clusters.rs), against one real
# etcd and then the Consul test double (reported as such, not as Consul). Prints the store's CPU, requests/s,
# bytes/s and the latencies of the leaders' renewals and of the reads.
# Usage: bench/many_clusters.sh [clusters=1000] [loop_wait_ms=10000] [seconds=60] [ttl_s=30] [etcd|consul|both]
# BENCH_NO_PUBLISH=1 or BENCH_NO_WATCH=1 leave that part of the cycle out, to attribute the store's load.
# The Consul test double, as Consul, refuses session TTLs under 10 s: keep ttl_s at 20 or more for it.
# Needs etcd (scripts/install-deps). Raises the open-file limit to the hard limit: each member holds its own connection.
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
cargo build --release --quiet --example many_clusters
for store in $([ "${5:-both}" = both ] && echo etcd consul || echo "$5"); do
  target/release/examples/many_clusters "$store" "${1:-1000}" "${2:-10000}" "${3:-60}" "${4:-30}"
done
