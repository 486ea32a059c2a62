#!/usr/bin/env bash
# Store requests and bytes per idle HA cycle (leader and replica) on etcd, measured by a counting proxy.
# Usage: bench/store_requests.sh [cycles] [loop_wait_ms]   (defaults: 3 cycles, 10000 ms, as Patroni's loop_wait)
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --quiet --example store_requests -- "${1:-3}" "${2:-10000}"
