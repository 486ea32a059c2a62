# Sourced by the bench scripts: a 3-node tenure cluster on one etcd (bench/etcd.sh: the build, the temp dir W
# and its clean-up on exit), as the postgres user. Defines BIN, W, PGP[], API[], sql, primary, healthy,
# start_agent; returns once one primary and two replicas run. TTL, LOOP_WAIT and RETRY (seconds)
# set the bootstrap timing (defaults 10, 1, 2).
source "$(dirname "${BASH_SOURCE[0]}")/etcd.sh"
for i in 1 2 3; do
  node_config "$i" bench "ttl: ${TTL:-10}, loop_wait: ${LOOP_WAIT:-1}, retry_timeout: ${RETRY:-2}" "tenure: {fence_budget: 1}"
done
chown -R postgres:postgres "$W"
start_agent() { runuser -u postgres -- "$BIN" agent --config "$W/pg$1.yml" >>"$W/agent$1.log" 2>&1 & }
for i in 1 2 3; do start_agent $i; done
sql() { PGPASSWORD=secret psql -h 127.0.0.1 -p "${PGP[$1]}" -U postgres -Atc "$2" 2>/dev/null; }
primary() { for i in 1 2 3; do [ "$(sql $i 'select pg_is_in_recovery()')" = f ] && echo $i && return; done; }
healthy() { local n=0; for i in 1 2 3; do [ "$(sql $i 'select pg_is_in_recovery()')" = t ] && n=$((n+1)); done; [ "$n" = 2 ] && [ -n "$(primary)" ]; }
for _ in $(seq 1 120); do healthy && break; sleep 1; done
