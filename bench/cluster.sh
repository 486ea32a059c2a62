# Sourced by the bench scripts: a 3-node tenure cluster on one etcd (bench/etcd.sh: the build, the temp dir W
# and its clean-up on exit), as the postgres user. Defines BIN, W, PGP[], API[], sql, primary, healthy,
# start_agent, sync_listed; returns once one primary and two replicas run. TTL, LOOP_WAIT and RETRY (seconds)
# set the bootstrap timing (defaults 10, 1, 2); SYNC=1 bootstraps with synchronous_mode on (SYNC=strict: and
# synchronous_mode_strict) and also waits until a standby is listed in the sync key.
source "$(dirname "${BASH_SOURCE[0]}")/etcd.sh"
case ${SYNC:-} in
  "") SYNC_DCS="" ;;
  strict) SYNC_DCS=", synchronous_mode: true, synchronous_mode_strict: true" ;;
  *) SYNC_DCS=", synchronous_mode: true" ;;
esac
for i in 1 2 3; do
  node_config "$i" bench "ttl: ${TTL:-10}, loop_wait: ${LOOP_WAIT:-1}, retry_timeout: ${RETRY:-2}$SYNC_DCS" "tenure: {fence_budget: 1}"
done
chown -R postgres:postgres "$W"
start_agent() { runuser -u postgres -- "$BIN" agent --config "$W/pg$1.yml" >>"$W/agent$1.log" 2>&1 & }
for i in 1 2 3; do start_agent $i; done
sql() { PGPASSWORD=secret psql -h 127.0.0.1 -p "${PGP[$1]}" -U postgres -Atc "$2" 2>/dev/null; }
primary() { for i in 1 2 3; do [ "$(sql $i 'select pg_is_in_recovery()')" = f ] && echo $i && return; done; }
# A replica answers GET /sync with 200: the sync key lists it under the running leader.
sync_listed() { for i in 1 2 3; do [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${API[$i]}/sync")" = 200 ] && return 0; done; return 1; }
# Healthy: one primary, two replicas, and with SYNC a listed synchronous standby.
healthy() {
  local n=0; for i in 1 2 3; do [ "$(sql $i 'select pg_is_in_recovery()')" = t ] && n=$((n+1)); done
  [ "$n" = 2 ] && [ -n "$(primary)" ] && { [ -z "${SYNC:-}" ] || sync_listed; }
}
for _ in $(seq 1 120); do healthy && break; sleep 1; done
