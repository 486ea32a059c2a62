# Sourced by the bench scripts: a 3-node tenure cluster on one etcd, as the postgres user, in a temp dir
# removed on exit (KEEP=1 keeps it, with the agents' logs). Defines BIN, W, PGP[], API[], sql, primary,
# healthy, start_agent; returns once one primary and two replicas run. TTL, LOOP_WAIT and RETRY (seconds)
# set the bootstrap timing (defaults 10, 1, 2).
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# NO_BUILD=1 runs the release binary already there (a build of a different target set can re-resolve
# features and recompile the crate for minutes).
[ -n "${NO_BUILD:-}" ] && [ -x "$ROOT/target/release/tenure" ] ||
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" --bin tenure --example failover_writer
BIN=$ROOT/target/release/tenure
WRITER=$ROOT/target/release/examples/failover_writer
W=$(mktemp -d /tmp/tenure-bench.XXXXXX)
chown postgres:postgres "$W"
cleanup() {
  pkill -TERM -f "$BIN agent --config $W/" 2>/dev/null || true
  sleep 3
  pkill -KILL -f "$BIN agent --config $W/" 2>/dev/null || true
  for d in "$W"/data*; do [ -f "$d/postmaster.pid" ] && kill -9 "$(head -1 "$d/postmaster.pid")" 2>/dev/null || true; done
  pkill -f "$BIN fencer --file $W/" 2>/dev/null || true
  [ -f "$W/etcd.pid" ] && kill "$(cat "$W/etcd.pid")" 2>/dev/null || true
  sleep 1; if [ -n "${KEEP:-}" ]; then echo "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EP=$(free_port); EPP=$(free_port)
runuser -u postgres -- /usr/bin/etcd --data-dir "$W/etcd" --listen-client-urls "http://127.0.0.1:$EP" \
  --advertise-client-urls "http://127.0.0.1:$EP" --listen-peer-urls "http://127.0.0.1:$EPP" >"$W/etcd.log" 2>&1 &
echo $! >"$W/etcd.pid"
declare -a PGP API
for i in 1 2 3; do
  PGP[$i]=$(free_port); API[$i]=$(free_port)
  cat >"$W/pg$i.yml" <<EOY
scope: bench
name: pg$i
restapi: {listen: "127.0.0.1:${API[$i]}", connect_address: "127.0.0.1:${API[$i]}", allow_unauthenticated: true}
etcd3: {host: "127.0.0.1:$EP"}
bootstrap: {dcs: {ttl: ${TTL:-10}, loop_wait: ${LOOP_WAIT:-1}, retry_timeout: ${RETRY:-2}}}
postgresql:
  data_dir: $W/data$i
  bin_dir: /usr/lib/postgresql/15/bin
  listen: 127.0.0.1:${PGP[$i]}
  connect_address: 127.0.0.1:${PGP[$i]}
  pgpass: $W/pgpass$i
  authentication: {superuser: {username: postgres, password: secret}, replication: {username: replicator, password: rsecret}}
tenure: {fence_budget: 1}
watchdog: {mode: "off"}
EOY
done
chown -R postgres:postgres "$W"
start_agent() { runuser -u postgres -- "$BIN" agent --config "$W/pg$1.yml" >>"$W/agent$1.log" 2>&1 & }
for i in 1 2 3; do start_agent $i; done
sql() { PGPASSWORD=secret psql -h 127.0.0.1 -p "${PGP[$1]}" -U postgres -Atc "$2" 2>/dev/null; }
primary() { for i in 1 2 3; do [ "$(sql $i 'select pg_is_in_recovery()')" = f ] && echo $i && return; done; }
healthy() { local n=0; for i in 1 2 3; do [ "$(sql $i 'select pg_is_in_recovery()')" = t ] && n=$((n+1)); done; [ "$n" = 2 ] && [ -n "$(primary)" ]; }
for _ in $(seq 1 120); do healthy && break; sleep 1; done
