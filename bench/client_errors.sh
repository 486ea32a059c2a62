#!/usr/bin/env bash
# What clients see of planned handovers (issue 31): 16 clients, each on one connection through HAProxy, one small
# write transaction at a time (examples/client_load.rs), during SWITCHOVERS switchovers, RESTARTS scheduled restarts
# of the primary and CRASHES crashes of the primary's host, in one run per setup:
#   a  tenure + HAProxy (templates/haproxy-pgbouncer.cfg) + a PgBouncer per host, driven by its agent
#   b  tenure + HAProxy (templates/haproxy.cfg), clients straight to PostgreSQL
#   c  Patroni 3.0.2 + HAProxy (templates/haproxy.cfg)
# Per setup and kind of event: failed transactions, broken connections (open ones that broke) and failed
# connection attempts (the clients retry every 100 ms) per event (mean, max), the longest transaction latency
# during a handover, and for a crash the promotion time and the error window (from the crash to the last error).
# Usage: bench/client_errors.sh [setups="a b c"]; SWITCHOVERS (10), RESTARTS (3), CRASHES (1); NO_BUILD=1 uses the
# release binaries already built; KEEP=1 keeps the folder with every log. Needs root (PostgreSQL, the agents,
# PgBouncer and HAProxy run as postgres), etcd, PostgreSQL 15, PgBouncer, HAProxy, patroni (for c), curl, psql.
# Every process it starts, and every orphan of theirs, is stopped by its PID after each setup (bench/reaper.sh).
set -euo pipefail
source "$(dirname "$0")/reaper.sh"
SETUPS=${1:-a b c}
SWITCHOVERS=${SWITCHOVERS:-10}; RESTARTS=${RESTARTS:-3}; CRASHES=${CRASHES:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# PROFILE=debug NO_BUILD=1 tries the script itself on the debug binaries; figures come from release builds.
T=$ROOT/target/${PROFILE:-release}
[ -n "${NO_BUILD:-}" ] && [ -x "$T/tenure" ] && [ -x "$T/examples/client_load" ] ||
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" --bin tenure --example client_load
BIN=$T/tenure
LOAD=$T/examples/client_load
W=$(mktemp -d /tmp/tenure-client-errors.XXXXXX)
chown postgres:postgres "$W"
# Exec'd as postgres: setpriv keeps the PID, so `$!` of `"${AS_PG[@]}" cmd &` is the process itself (a shell
# function run with `&` would be a subshell): the crash kills the agent and PgBouncer by these PIDs.
AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups --)
EP_PID=""
# Every descendant by PID (the agents stop their PostgreSQL on SIGTERM), etcd last.
stop_all() { stop_descendants $EP_PID || true; EP_PID=""; }
cleanup() { stop_all; if [ -n "${KEEP:-}" ]; then echo "kept $W"; else rm -rf "$W"; fi; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { date +%s%3N; }
sql() { PGPASSWORD=secret psql -h 127.0.0.1 -p "$1" -U postgres -d postgres -Atc "$2" 2>/dev/null; }
declare -a PGP API PBP NAME PGB

start_etcd() {
  local ep epp; ep=$(free_port); epp=$(free_port)
  "${AS_PG[@]}" /usr/bin/etcd --data-dir "$D/etcd" --listen-client-urls "http://127.0.0.1:$ep" \
    --advertise-client-urls "http://127.0.0.1:$ep" --listen-peer-urls "http://127.0.0.1:$epp" >"$D/etcd.log" 2>&1 &
  EP_PID=$!; EP=$ep
}

# PgBouncer for node $1 (transaction pooling), first routing to the node itself; the agent repoints it.
start_pgbouncer() {
  local i=$1 dir="$D/n$1/pgbouncer"
  mkdir -p "$dir"
  printf '"postgres" "secret"\n"pgbouncer" "admin"\n' >"$dir/userlist.txt"
  # Once: after a host crash PgBouncer comes back with the file its agent last wrote.
  [ -f "$dir/databases.ini" ] ||
    printf '[databases]\npostgres = host=127.0.0.1 port=%s dbname=postgres\n' "${PGP[$i]}" >"$dir/databases.ini"
  cat >"$dir/pgbouncer.ini" <<EOI
[databases]
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${PBP[$i]}
unix_socket_dir = $dir
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
admin_users = pgbouncer
pool_mode = transaction
max_client_conn = 200
default_pool_size = 40
query_wait_timeout = 60
server_login_retry = 0.1
logfile = $dir/pgbouncer.log
%include $dir/databases.ini
EOI
  chown -R postgres:postgres "$dir"
  "${AS_PG[@]}" /usr/sbin/pgbouncer "$dir/pgbouncer.ini" >/dev/null 2>&1 &
  PGB[$i]=$!
}

tenure_config() { # $1 node, $2 extra YAML
  cat >"$D/n$1/tenure.yml" <<EOY
scope: bench
name: ${NAME[$1]}
restapi: {listen: "127.0.0.1:${API[$1]}", connect_address: "127.0.0.1:${API[$1]}", allow_unauthenticated: true}
etcd3: {host: "127.0.0.1:$EP"}
bootstrap: {dcs: {ttl: 10, loop_wait: 1, retry_timeout: 2}}
postgresql:
  data_dir: $D/n$1/data
  bin_dir: /usr/lib/postgresql/15/bin
  listen: 127.0.0.1:${PGP[$1]}
  connect_address: 127.0.0.1:${PGP[$1]}
  pgpass: $D/n$1/pgpass
  authentication: {superuser: {username: postgres, password: secret}, replication: {username: replicator, password: rsecret}}
  parameters: {unix_socket_directories: '$D/n$1', max_connections: 100}
watchdog: {mode: "off"}
tenure: {fence_budget: 1}
$2
EOY
}

patroni_config() {
  cat >"$D/n$1/patroni.yml" <<EOY
scope: bench
namespace: /service/
name: ${NAME[$1]}
restapi: {listen: "127.0.0.1:${API[$1]}", connect_address: "127.0.0.1:${API[$1]}"}
etcd3: {hosts: "127.0.0.1:$EP"}
bootstrap:
  dcs: {ttl: 10, loop_wait: 1, retry_timeout: 2, maximum_lag_on_failover: 1048576,
        postgresql: {use_pg_rewind: true, use_slots: true, parameters: {wal_log_hints: 'on', max_connections: 100}}}
postgresql:
  listen: 127.0.0.1:${PGP[$1]}
  connect_address: 127.0.0.1:${PGP[$1]}
  data_dir: $D/n$1/data
  bin_dir: /usr/lib/postgresql/15/bin
  pgpass: $D/n$1/pgpass
  authentication: {superuser: {username: postgres, password: secret}, replication: {username: replicator, password: rsecret}}
  parameters: {unix_socket_directories: '$D/n$1'}
  pg_hba: [local all all trust, host all all 127.0.0.1/32 md5, host replication replicator 127.0.0.1/32 md5]
watchdog: {mode: "off"}
EOY
}

start_agent() { # $1 node
  if [ "$SETUP" = c ]; then
    "${AS_PG[@]}" env HOME="$D/n$1" /usr/bin/patroni "$D/n$1/patroni.yml" >>"$D/n$1/agent.log" 2>&1 &
  else
    "${AS_PG[@]}" "$BIN" agent --config "$D/n$1/tenure.yml" >>"$D/n$1/agent.log" 2>&1 &
  fi
  AGENT[$1]=$!
}

# HAProxy's write listener, from the template's `listen primary` block with our servers.
start_haproxy() {
  local tpl=$ROOT/templates/haproxy.cfg target=PGP
  [ "$SETUP" = a ] && { tpl=$ROOT/templates/haproxy-pgbouncer.cfg; target=PBP; }
  HP=$(free_port)
  awk -v port="$HP" '/^listen replicas/ {exit} /^ *server / {next} {sub(/bind \*:5000/, "bind 127.0.0.1:" port); print}' "$tpl" >"$D/haproxy.cfg"
  local i; for i in 1 2 3; do
    local -n tp=$target
    echo "    server ${NAME[$i]} 127.0.0.1:${tp[$i]} maxconn 100 check port ${API[$i]}" >>"$D/haproxy.cfg"
  done
  chown postgres:postgres "$D/haproxy.cfg"
  "${AS_PG[@]}" /usr/sbin/haproxy -db -f "$D/haproxy.cfg" >"$D/haproxy.log" 2>&1 &
}

primary() { local i; for i in 1 2 3; do [ "$(sql "${PGP[$i]}" 'select pg_is_in_recovery()')" = f ] && echo "$i" && return; done; true; }
streaming() { [ "$(sql "${PGP[$1]}" 'select status from pg_stat_wal_receiver')" = streaming ]; }
routed() { # every PgBouncer routes to node $1 (setup a only)
  [ "$SETUP" != a ] && return 0
  local i; for i in 1 2 3; do
    curl -s "http://127.0.0.1:${API[$i]}/patroni" | grep -q "\"routed_to\":\"${NAME[$1]}\"" || return 1
  done
}
healthy() {
  local p; p=$(primary); [ -n "$p" ] || return 1
  local i; for i in 1 2 3; do [ "$i" = "$p" ] || streaming "$i" || return 1; done
  routed "$p"
}
wait_healthy() { local _; for _ in $(seq 1 1200); do healthy && return 0; sleep 0.1; done; echo "not healthy" >&2; return 1; }

# One event; appends "<kind> <start_ms> <end_ms> <promotion_ms>" to $D/events.
event() {
  local kind=$1 p c t0 t1 prom=0; p=$(primary)
  t0=$(now_ms)
  case $kind in
    switchover)
      for c in $(( p % 3 + 1 )) $(( (p + 1) % 3 + 1 )); do streaming "$c" && break; done
      curl -s -o /dev/null -H 'Content-Type: application/json' \
        -d "{\"leader\": \"${NAME[$p]}\", \"candidate\": \"${NAME[$c]}\"}" "http://127.0.0.1:${API[$p]}/switchover" ;;
    restart)
      local at; at=$(date -u -d '+2 seconds' +%Y-%m-%dT%H:%M:%S+00:00)
      curl -s -o /dev/null -H 'Content-Type: application/json' -d "{\"schedule\": \"$at\"}" \
        "http://127.0.0.1:${API[$p]}/restart"
      # Wait for the restart itself: PostgreSQL's start time moves.
      local st; st=$(sql "${PGP[$p]}" 'select pg_postmaster_start_time()')
      local _; for _ in $(seq 1 300); do
        local now; now=$(sql "${PGP[$p]}" 'select pg_postmaster_start_time()' || true)
        [ -n "$now" ] && [ "$now" != "$st" ] && break; sleep 0.1
      done ;;
    crash)
      kill -KILL "${AGENT[$p]}" 2>/dev/null || true
      local f; for f in "$D/n$p/data/postmaster.pid" "$D/n$p/data.fence.pid"; do
        [ -f "$f" ] && kill -KILL "$(head -1 "$f")" 2>/dev/null || true
      done
      [ "$SETUP" = a ] && kill -KILL "${PGB[$p]}" 2>/dev/null || true
      local _; for _ in $(seq 1 1200); do
        local n; n=$(primary); [ -n "$n" ] && [ "$n" != "$p" ] && break; sleep 0.05
      done
      prom=$(( $(now_ms) - t0 ))
      [ "$SETUP" = a ] && start_pgbouncer "$p"
      start_agent "$p" ;;
  esac
  wait_healthy
  sleep 1
  t1=$(now_ms)
  echo "$kind $t0 $t1 $prom" >>"$D/events"
}

run_setup() {
  SETUP=$1; D=$W/$SETUP; mkdir -p "$D"; chown postgres:postgres "$D"
  declare -ga AGENT=()
  start_etcd
  local i; for i in 1 2 3; do
    PGP[$i]=$(free_port); API[$i]=$(free_port); PBP[$i]=$(free_port); NAME[$i]=pg$i
    mkdir -p "$D/n$i"
  done
  for i in 1 2 3; do
    case $SETUP in
      # chain: HAProxy keeps a client's session on the host it started on, whose PgBouncer routes through the
      # leader's: the leader's PAUSE holds every client. One host here, so each PgBouncer's port is a tag.
      a) start_pgbouncer "$i"
         tenure_config "$i" "pgbouncer: {socket_dir: $D/n$i/pgbouncer, port: ${PBP[$i]}, databases: [postgres],
  databases_file: $D/n$i/pgbouncer/databases.ini, step_timeout: 1, chain: true}
tags: {pgbouncer_port: ${PBP[$i]}}" ;;
      b) tenure_config "$i" "" ;;
      c) patroni_config "$i" ;;
    esac
  done
  chown -R postgres:postgres "$D"
  for i in 1 2 3; do start_agent "$i"; sleep 1; done
  wait_healthy
  sql "${PGP[$(primary)]}" "CREATE TABLE bench_ce (client int, seq bigint, PRIMARY KEY (client, seq))" >/dev/null
  start_haproxy
  sleep 3
  rm -f "$D/stop"
  "$LOAD" "host=127.0.0.1 port=$HP user=postgres password=secret dbname=postgres connect_timeout=5" 16 "$D/stop" \
    >"$D/load.log" &
  local lpid=$!
  sleep 5
  local k; for k in $(seq 1 "$SWITCHOVERS"); do event switchover; done
  for k in $(seq 1 "$RESTARTS"); do event restart; done
  for k in $(seq 1 "$CRASHES"); do event crash; done
  touch "$D/stop"; wait "$lpid" || true
  report
  stop_all
}

# Per kind: events, failed transactions and connections per event (mean, max), the longest transaction; crash:
# promotion time and error window.
report() {
  local kind
  for kind in switchover restart crash; do
    grep -q "^$kind " "$D/events" 2>/dev/null || continue
    awk -v kind="$kind" -v setup="$SETUP" '
      FNR == NR { if ($1 == kind) { n++; s[n] = $2; e[n] = $3; p[n] = $4 }; next }
      { for (k = 1; k <= n; k++) if (($1 >= s[k] && $1 < e[k]) || ($3 == "ok" && $1 - $4 >= s[k] && $1 - $4 < e[k])) {
          if ($3 == "tx_error") { tx[k]++; if ($1 > last[k]) last[k] = $1 }
          if ($3 == "conn_error") { cn[k]++; if ($1 > last[k]) last[k] = $1 }
          if ($3 == "connect_error") { ca[k]++; if ($1 > last[k]) last[k] = $1 }
          # A transaction by when it began: one held past the window still counts for the event.
          if ($3 == "ok" && $1 - $4 >= s[k] && $4 > lat) lat = $4 } }
      END {
        for (k = 1; k <= n; k++) { T += tx[k]; C += cn[k]; A += ca[k]
          if (tx[k] > mt) mt = tx[k]; if (cn[k] > mc) mc = cn[k]; if (ca[k] > ma) ma = ca[k]
          if (p[k]) { prom = prom " " p[k]; win = win " " (last[k] ? last[k] - s[k] : 0) } }
        printf "| %s | %s | %d | %.1f (max %d) | %.1f (max %d) | %.1f (max %d) | %d ms |", setup, kind, n, T / n, mt,
          C / n, mc, A / n, ma, lat
        if (kind == "crash") printf " promotion%s ms, error window%s ms |", prom, win
        printf "\n" }' "$D/events" "$D/load.log" | tee -a "$W/table"
  done
  echo "($SETUP: $(grep -c ' ok ' "$D/load.log") transactions acknowledged in all)"
}

echo "| setup | event | n | failed transactions / event | broken connections / event | failed connects / event | longest transaction | crash |"
echo "|---|---|---|---|---|---|---|---|"
for s in $SETUPS; do run_setup "$s"; done
echo "tenure $(git -C "$ROOT" rev-parse --short HEAD) (${PROFILE:-release}), $(pgbouncer --version | head -1), $(haproxy -v | head -1 | cut -d' ' -f1-3), patroni $(patroni --version | cut -d' ' -f2)"
echo "timing: ttl 10 s, loop_wait 1 s, retry_timeout 2 s; pgbouncer.step_timeout 1 s; load $(cut -d' ' -f1-3 /proc/loadavg)"
