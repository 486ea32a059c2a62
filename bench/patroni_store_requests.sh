#!/usr/bin/env bash
# Patroni 3.0.2's store requests per idle HA cycle on the Consul test double (three members, loop_wait 2 s), read from
# the double's request log and grouped by kind. Needs Debian's patroni and python3-consul; run as root or postgres.
# Usage: bench/patroni_store_requests.sh [window_s]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --quiet --example patroni_store_requests -- "${1:-60}"
