#!/usr/bin/env bash
# REST health-check throughput and latency: GET /primary on a primary with a valid lease, 64 keep-alive
# connections for 10 s, with wrk when installed and with the Rust load client (examples/health_load.rs).
# Usage: bench/health_bench.sh [connections] [seconds]   (defaults: 64, 10)
set -euo pipefail
cd "$(dirname "$0")/.."
conns="${1:-64}"
secs="${2:-10}"
cargo build --quiet --release --example health_load
bin=target/release/examples/health_load

echo "== Rust client (in-process server, same runtime) =="
"$bin" --connections "$conns" --seconds "$secs"

if command -v wrk >/dev/null; then
    port=$(( 20000 + RANDOM % 20000 ))
    "$bin" --serve "127.0.0.1:$port" &
    server=$!
    trap 'kill "$server" 2>/dev/null || true' EXIT
    for _ in $(seq 50); do
        curl -fsS -o /dev/null "http://127.0.0.1:$port/primary" 2>/dev/null && break
        sleep 0.1
    done
    echo "== wrk -t2 -c$conns -d${secs}s (server in its own process) =="
    wrk -t2 -c"$conns" -d"${secs}s" --latency "http://127.0.0.1:$port/primary"
    kill "$server"
    wait "$server" 2>/dev/null || true
else
    echo "wrk not installed: Rust client figures only"
fi
