#!/usr/bin/env bash
# Store requests and bytes per idle HA cycle (leader and replica) on etcd and on the Consul test double,
# measured by a counting proxy in front of the store.
# Usage: bench/store_requests.sh [cycles] [loop_wait_ms] [etcd|consul|both]   (defaults: 3, 10000 ms as Patroni's loop_wait, both)
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --quiet --example store_requests -- "${1:-3}" "${2:-10000}" "${3:-both}"
