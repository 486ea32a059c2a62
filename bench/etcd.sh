# Sourced by the bench scripts that run tenure clusters: the release build (NO_BUILD=1 runs the binaries already
# there: a build of a different target set can re-resolve features and recompile the crate for minutes), a temp
# dir W owned by postgres and removed on exit (KEEP=1 keeps it, with the logs) after every process the script
# started is stopped by PID (reaper.sh), free_port, one etcd on loopback at 127.0.0.1:$EP, and node_config.
source "$(dirname "${BASH_SOURCE[0]}")/reaper.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -n "${NO_BUILD:-}" ] && [ -x "$ROOT/target/release/tenure" ] ||
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" --bin tenure --bin tenure-fencer --example failover_writer
BIN=$ROOT/target/release/tenure
WRITER=$ROOT/target/release/examples/failover_writer
W=$(mktemp -d /tmp/tenure-bench.XXXXXX)
chown postgres:postgres "$W"
cleanup() {
  stop_descendants "$(cat "$W/etcd.pid" 2>/dev/null)"
  if [ -n "${KEEP:-}" ]; then echo "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EP=$(free_port); EPP=$(free_port)
setpriv --reuid=postgres --regid=postgres --init-groups /usr/bin/etcd --data-dir "$W/etcd" --listen-client-urls "http://127.0.0.1:$EP" \
  --advertise-client-urls "http://127.0.0.1:$EP" --listen-peer-urls "http://127.0.0.1:$EPP" >"$W/etcd.log" 2>&1 &
echo $! >"$W/etcd.pid"
declare -a PGP API
# node_config I SCOPE TIMING [EXTRA]: $W/pgI.yml for node pgI of SCOPE on the etcd above, TIMING the
# bootstrap.dcs flow mapping's contents ("ttl: 10, loop_wait: 1, retry_timeout: 2"), EXTRA more top-level YAML.
node_config() {
  PGP[$1]=$(free_port); API[$1]=$(free_port)
  cat >"$W/pg$1.yml" <<EOY
scope: $2
name: pg$1
restapi: {listen: "127.0.0.1:${API[$1]}", connect_address: "127.0.0.1:${API[$1]}", allow_unauthenticated: true}
etcd3: {host: "127.0.0.1:$EP"}
bootstrap: {dcs: {$3}}
postgresql:
  data_dir: $W/data$1
  bin_dir: /usr/lib/postgresql/15/bin
  listen: 127.0.0.1:${PGP[$1]}
  connect_address: 127.0.0.1:${PGP[$1]}
  pgpass: $W/pgpass$1
  authentication: {superuser: {username: postgres, password: secret}, replication: {username: replicator, password: rsecret}}
watchdog: {mode: "off"}
${4:-}
EOY
}
