# Sourced first by the side-by-side benches (footprint.sh, outage.sh): tenure, Patroni 3.0.2 and
# pg_auto_failover clusters on loopback, each on its own store, in one temp dir W owned by postgres.
# The script runs as a child subreaper (reaper.sh); on exit the agents
# get SIGTERM by PID, then every remaining descendant SIGTERM and SIGKILL by PID, and `ps` shows what is
# left (nothing, or the script says so). NO_BUILD=1 reuses target/release/tenure; KEEP=1 keeps W.
# Needs root, etcd, PostgreSQL 15, and for the peers `scripts/install-deps bench`.
source "$(dirname "${BASH_SOURCE[0]}")/reaper.sh"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -n "${NO_BUILD:-}" ] && [ -x "$ROOT/target/release/tenure" ] ||
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" --bin tenure --bin tenure-fencer
BIN=$ROOT/target/release/tenure
PGBIN=/usr/lib/postgresql/15/bin
W=$(mktemp -d /tmp/tenure-peers.XXXXXX)
chown postgres:postgres "$W"
AGENTS=() # PIDs stopped first, gracefully (each stops its own PostgreSQL)
STORES=() # PIDs stopped last

cleanup() {
  set +e
  local p ds
  for p in "${STORES[@]}"; do kill -CONT "$p" 2>/dev/null; done
  for p in "${AGENTS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 1 40); do alive "${AGENTS[@]}" || break; sleep 0.5; done
  # Orphaned postmasters and fencers are ours (subreaper): stop them, then the stores.
  stop_descendants "${STORES[@]}"
  ds=$(descendants); ds=${ds//$'\n'/ }
  local left
  left=$(ps -e -o pid=,args= | grep -F "$W" | grep -v grep || true)
  if [ -z "$ds$left" ]; then echo "# after the run: no process of this run left (ps)"; else echo "# LEFT RUNNING: $ds $left"; fi
  if [ -n "${KEEP:-}" ]; then echo "# kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# spawn_pg LOG [VAR=value ...] PROGRAM ARGS: run as postgres in the background, its PID in LAST_PID (setpriv and
# env exec, so the PID is the program's). A clean environment: HOME is W unless given.
spawn_pg() {
  local log=$1; shift
  setpriv --reuid postgres --regid postgres --init-groups env -i HOME="$W" USER=postgres LOGNAME=postgres \
    PATH="$PGBIN:/usr/bin:/bin" LANG=C.UTF-8 "$@" >>"$log" 2>&1 </dev/null &
  LAST_PID=$!
}
as_pg() { setpriv --reuid postgres --regid postgres --init-groups env -i HOME="$W" USER=postgres LOGNAME=postgres \
  PATH="$PGBIN:/usr/bin:/bin" LANG=C.UTF-8 "$@"; }
# primary / replica / down, from the data directory's control file (no connection, no password).
pg_role() { case $(as_pg pg_controldata "$1" 2>/dev/null | sed -n 's/^Database cluster state: *//p') in
  "in production") [ -f "$1/postmaster.pid" ] && echo primary || echo down ;;
  "in archive recovery") echo replica ;; *) echo down ;; esac; }
sql() { PGPASSWORD=secret PGCONNECT_TIMEOUT=2 psql -h 127.0.0.1 -p "$1" -U postgres -d postgres -Atc "$2" 2>/dev/null; }

# start_etcd NAME: an etcd on free loopback ports with its data in W/NAME; its client URL in ETCD_URL[NAME].
declare -A ETCD_URL ETCD_PID
start_etcd() {
  local cp pp; cp=$(free_port); pp=$(free_port)
  spawn_pg "$W/$1.log" /usr/bin/etcd --name "$1" --data-dir "$W/$1" --listen-client-urls "http://127.0.0.1:$cp" \
    --advertise-client-urls "http://127.0.0.1:$cp" --listen-peer-urls "http://127.0.0.1:$pp" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pp" --initial-cluster "$1=http://127.0.0.1:$pp"
  ETCD_PID[$1]=$LAST_PID; STORES+=("$LAST_PID"); ETCD_URL[$1]=http://127.0.0.1:$cp
  for _ in $(seq 1 50); do curl -sf "${ETCD_URL[$1]}/health" >/dev/null && return; sleep 0.2; done
  echo "etcd $1 did not start" >&2; exit 1
}

# tenure_cluster ETCD TIMING: three tenure agents (pg1..pg3, scope `tenure`) on that etcd; TIMING is the
# bootstrap.dcs flow mapping's contents. Agents' PIDs in T_AGENT[1..3], ports in T_PG[], T_API[], data in T_DATA[].
declare -a T_AGENT T_PG T_API T_DATA
tenure_cluster() {
  local i d=$W/tenure; mkdir -p "$d"; chown postgres:postgres "$d"
  for i in 1 2 3; do
    T_PG[$i]=$(free_port); T_API[$i]=$(free_port); T_DATA[$i]=$d/data$i
    cat >"$d/pg$i.yml" <<EOY
scope: tenure
name: pg$i
restapi: {listen: "127.0.0.1:${T_API[$i]}", connect_address: "127.0.0.1:${T_API[$i]}", allow_unauthenticated: true}
etcd3: {host: "${ETCD_URL[$1]#http://}"}
bootstrap: {dcs: {$2}}
postgresql:
  data_dir: ${T_DATA[$i]}
  bin_dir: $PGBIN
  listen: 127.0.0.1:${T_PG[$i]}
  connect_address: 127.0.0.1:${T_PG[$i]}
  pgpass: $d/pgpass$i
  authentication: {superuser: {username: postgres, password: secret}, replication: {username: replicator, password: rsecret}}
watchdog: {mode: "off"}
tenure: {fence_budget: 1}
EOY
  done
  chown -R postgres:postgres "$d"
  for i in 1 2 3; do spawn_pg "$d/agent$i.log" "$BIN" agent --config "$d/pg$i.yml"; T_AGENT[$i]=$LAST_PID; AGENTS+=("$LAST_PID"); done
}
# The fencing process of tenure node I, if one runs (the agent writes its PID beside the data directory).
t_fencer() { local p; p=$(cat "${T_DATA[$1]}.fence.pid" 2>/dev/null) && kill -0 "$p" 2>/dev/null && echo "$p"; true; }

# patroni_cluster ETCD TIMING: three Patroni 3.0.2 nodes (p1..p3, scope `patroni`); PIDs in P_AGENT[], ports in
# P_PG[], P_API[], data in P_DATA[].
declare -a P_AGENT P_PG P_API P_DATA
patroni_cluster() {
  local i d
  for i in 1 2 3; do
    d=$W/patroni/p$i; mkdir -p "$d"
    P_PG[$i]=$(free_port); P_API[$i]=$(free_port); P_DATA[$i]=$d/data
    cat >"$d/patroni.yml" <<EOY
scope: patroni
namespace: /service/
name: p$i
restapi: {listen: "127.0.0.1:${P_API[$i]}", connect_address: "127.0.0.1:${P_API[$i]}"}
etcd3: {hosts: "${ETCD_URL[$1]#http://}"}
bootstrap: {dcs: {$2}}
postgresql:
  listen: 127.0.0.1:${P_PG[$i]}
  connect_address: 127.0.0.1:${P_PG[$i]}
  data_dir: ${P_DATA[$i]}
  bin_dir: $PGBIN
  pgpass: $d/pgpass
  authentication: {superuser: {username: postgres, password: secret}, replication: {username: replicator, password: rsecret}}
  parameters: {unix_socket_directories: '$d'}
  pg_hba: [local all all trust, host all all 127.0.0.1/32 md5, host replication replicator 127.0.0.1/32 md5]
watchdog: {mode: "off"}
EOY
  done
  chown -R postgres:postgres "$W/patroni"
  for i in 1 2 3; do
    spawn_pg "$W/patroni/p$i/patroni.log" HOME="$W/patroni/p$i" /usr/bin/patroni "$W/patroni/p$i/patroni.yml"
    P_AGENT[$i]=$LAST_PID; AGENTS+=("$LAST_PID")
    # The first node bootstraps before the others join, so which one leads is known (p1).
    if [ "$i" = 1 ]; then for _ in $(seq 1 60); do
      [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${P_API[1]}/primary")" = 200 ] && break; sleep 1; done; fi
  done
}

# paf_cluster: pg_auto_failover 2.0 at its defaults: a monitor and two keeper nodes (n1, n2), each a
# `pg_autoctl` process tree running its PostgreSQL; PIDs in A_AGENT[monitor|n1|n2], ports A_PG[], data A_DATA[].
declare -A A_AGENT A_PG A_DATA
paf_env=()
paf_cluster() {
  local d=$W/paf n mon; mkdir -p "$d/xdg"; chown -R postgres:postgres "$d"
  paf_env=(XDG_CONFIG_HOME="$d/xdg/config" XDG_DATA_HOME="$d/xdg/data" XDG_RUNTIME_DIR="$d/xdg/run")
  for n in monitor n1 n2; do A_PG[$n]=$(free_port); A_DATA[$n]=$d/$n; done
  as_pg "${paf_env[@]}" pg_autoctl create monitor --pgdata "${A_DATA[monitor]}" --pgport "${A_PG[monitor]}" \
    --hostname 127.0.0.1 --listen 127.0.0.1 --auth trust --no-ssl >>"$d/monitor.log" 2>&1
  spawn_pg "$d/monitor.log" "${paf_env[@]}" pg_autoctl run --pgdata "${A_DATA[monitor]}"
  A_AGENT[monitor]=$LAST_PID; AGENTS+=("$LAST_PID")
  mon="postgres://autoctl_node@127.0.0.1:${A_PG[monitor]}/pg_auto_failover?sslmode=disable"
  for _ in $(seq 1 60); do as_pg "${paf_env[@]}" pg_autoctl show state --pgdata "${A_DATA[monitor]}" >/dev/null 2>&1 && break; sleep 1; done
  for n in n1 n2; do
    spawn_pg "$d/$n.log" "${paf_env[@]}" pg_autoctl create postgres --pgdata "${A_DATA[$n]}" --pgport "${A_PG[$n]}" \
      --hostname 127.0.0.1 --listen 127.0.0.1 --auth trust --no-ssl --monitor "$mon" --name "$n" --run
    A_AGENT[$n]=$LAST_PID; AGENTS+=("$LAST_PID")
    # n1 is primary before n2 registers, so it becomes the secondary.
    for _ in $(seq 1 90); do [ "$(pg_role "${A_DATA[$n]}")" = "$( [ $n = n1 ] && echo primary || echo replica)" ] && break; sleep 1; done
  done
}
paf_state() { as_pg "${paf_env[@]}" pg_autoctl show state --pgdata "${A_DATA[monitor]}" 2>/dev/null; }

# The run's conditions, for the report.
conditions() {
  echo "# $(date -u +%FT%TZ), $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(free -g | awk '/Mem/ {print $2}') GB," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
}
# The commit the release binary was built from: the last one that changed what goes into it.
build_commit() { git -C "$ROOT" log -1 --format=%h -- src Cargo.toml Cargo.lock build.rs 2>/dev/null
  git -C "$ROOT" diff --quiet HEAD -- src Cargo.toml Cargo.lock 2>/dev/null || echo "(+ uncommitted changes)"; }
