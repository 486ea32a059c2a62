#!/usr/bin/env bash
# Store outage beside Patroni (issue 30), in one run: a 3-node tenure cluster at its default (no failsafe_mode
# key anywhere in its config: failsafe is tenure's default) and a 3-node Patroni 3.0.2 cluster with
# `failsafe_mode: true` in bootstrap.dcs, each on an etcd of its own, same timing (ttl 10, loop_wait 1,
# retry_timeout 4 by default: TTL, LOOP_WAIT, RETRY). Per cluster a writer inserts one row per transaction every
# 50 ms through the multi-host conninfo (target_session_attrs=read-write) and records each acknowledged commit; a
# sampler asks every node `pg_is_in_recovery()` every 200 ms. SETTLE s after both clusters settled, both etcds
# are frozen with SIGSTOP for OUTAGE s, then SIGCONT; AFTER s later the writers stop. Prints, per cluster: when the
# first primary stopped being writable, seconds without a writable node (sampler) and the writer's longest gap,
# samples with two writable nodes, acknowledged writes missing from the primary afterwards, and how long after
# the store returned one writable node answered GET /primary 200.
# A control run with failsafe off on both: TENURE_DCS="failsafe_mode: false" PATRONI_FAILSAFE=false bench/outage.sh.
# Usage: bench/outage.sh [runs=1] [outage_s=60] [settle_s=30] [after_s=30]. Needs root, etcd, PostgreSQL 15,
# `scripts/install-deps bench` (patroni, python3-psycopg2). NO_BUILD=1 reuses the release binary.
set -euo pipefail
source "$(dirname "$0")/peers.sh"
RUNS=${1:-1}
OUTAGE_S=${2:-60}
SETTLE_S=${3:-30}
AFTER_S=${4:-30}
TIMING="ttl: ${TTL:-10}, loop_wait: ${LOOP_WAIT:-1}, retry_timeout: ${RETRY:-4}"
[ -x /usr/bin/patroni ] && /usr/bin/python3 -c 'import psycopg2' || { echo "run scripts/install-deps bench" >&2; exit 1; }

start_etcd etcd-tenure
start_etcd etcd-patroni
tenure_cluster etcd-tenure "$TIMING${TENURE_DCS:+, $TENURE_DCS}"
# Unless TENURE_DCS asks otherwise, tenure's default is what is measured: nothing in its config may name failsafe.
[ -n "${TENURE_DCS:-}" ] || ! grep -qi failsafe "$W"/tenure/pg*.yml ||
  { echo "the tenure config pins failsafe: $(grep -i failsafe "$W"/tenure/pg*.yml)" >&2; exit 1; }
patroni_cluster etcd-patroni "$TIMING, failsafe_mode: ${PATRONI_FAILSAFE:-true}"
declare -A DATA PORT APIP
for i in 1 2 3; do
  DATA[tenure.$i]=${T_DATA[$i]}; PORT[tenure.$i]=${T_PG[$i]}; APIP[tenure.$i]=${T_API[$i]}
  DATA[patroni.$i]=${P_DATA[$i]}; PORT[patroni.$i]=${P_PG[$i]}; APIP[patroni.$i]=${P_API[$i]}
done
primary_of() { for i in 1 2 3; do if [ "$(pg_role "${DATA[$1.$i]}")" = primary ]; then echo "$i"; fi; done; }
healthy() { local s i n; for s in tenure patroni; do n=0
  for i in 1 2 3; do [ "$(pg_role "${DATA[$s.$i]}")" = replica ] && n=$((n + 1)); done
  [ "$n" = 2 ] && [ "$(primary_of "$s" | wc -l)" = 1 ] || return 1; done; }

cat >"$W/outage.py" <<'EOPY'
import sys, time, urllib.error, urllib.request, psycopg2

def ms():
    return int(time.time() * 1000)

def connect(dsn):
    c = psycopg2.connect(dsn, connect_timeout=2, options="-c statement_timeout=2000")
    c.autocommit = True
    return c

def writer(dsn, first_id, interval_s):
    """One row per transaction every interval_s; prints `<unix_ms> <id>` for each acknowledged commit."""
    i, conn, due = int(first_id), None, time.monotonic()
    while True:
        due += float(interval_s)
        try:
            conn = conn or connect(dsn)
            conn.cursor().execute("INSERT INTO bench(id) VALUES (%s)", (i,))
            print(ms(), i, flush=True)
            i += 1
        except psycopg2.Error:
            try:
                conn and conn.close()
            except psycopg2.Error:
                pass
            conn = None
        time.sleep(max(0.0, due - time.monotonic()))

def api_primary(port):
    """GET /primary's status code (what a load balancer routes writes by), 0 for no answer within 0.5 s."""
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/primary", timeout=0.5).status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0

def sampler(*nodes):
    """Every 200 ms, each node (cluster.i:pg_port:api_port): `<unix_ms> cluster.i w|r|x <code>`: writable, in
    recovery or no answer from PostgreSQL, and the REST API's GET /primary status code."""
    conns = {}
    while True:
        t = ms()
        for node in nodes:
            name, port, api = node.split(":")
            try:
                c = conns.get(name) or connect(f"host=127.0.0.1 port={port} user=postgres password=secret dbname=postgres")
                conns[name] = c
                cur = c.cursor()
                cur.execute("select pg_is_in_recovery()")
                state = "r" if cur.fetchone()[0] else "w"
            except psycopg2.Error:
                state = "x"
                try:
                    conns.pop(name).close()
                except (KeyError, psycopg2.Error):
                    pass
            print(t, name, state, api_primary(api), flush=True)
        time.sleep(max(0.0, 0.2 - (ms() - t) / 1000))

def report(cluster, samples, acks, present, t_stop, t_cont, t_end, p0, p0_name, t_api):
    """The figures for `cluster` from the sampler's and the writer's logs."""
    rounds, api = {}, {}
    for line in open(samples):
        t, name, state, code = line.split()
        if name.startswith(cluster + "."):
            rounds.setdefault(int(t), {})[name] = state
            api.setdefault(int(t), {})[name] = code
    times = sorted(rounds)
    t_stop, t_cont, t_end = int(t_stop), int(t_cont), int(t_end)
    dark = api_dark = 0.0
    for a, b in zip(times, times[1:]):
        if a >= t_stop and a < t_end and "w" not in rounds[a].values():
            dark += (b - a) / 1000
        if a >= t_stop and a < t_end and "200" not in api[a].values():
            api_dark += (b - a) / 1000
    two = sum(1 for t in times if list(rounds[t].values()).count("w") > 1)
    two_api = sum(1 for t in times if list(api[t].values()).count("200") > 1)
    fenced = next((t - t_stop for t in times if t >= t_stop and rounds[t].get(f"{cluster}.{p0}") != "w"), None)
    acked = [tuple(map(int, l.split())) for l in open(acks) if len(l.split()) == 2]
    ids = {i for _, i in acked}
    got = {int(l) for l in open(present) if l.strip()}
    during = [t for t, _ in acked if t_stop - 1000 <= t <= t_end]
    gap = max((b - a for a, b in zip(during, during[1:])), default=None)
    fenced_s = "never" if fenced is None else f"{fenced / 1000:.1f} s into the outage"
    gap_s = "none" if gap is None else f"{gap / 1000:.2f} s"
    print(f"{cluster}: primary {p0_name} stopped being writable: {fenced_s}")
    print(f"{cluster}:   no writable node for {dark:.1f} s, no node answering GET /primary 200 for {api_dark:.1f} s"
          f" (of the {(t_end - t_stop) / 1000:.0f} s from SIGSTOP to the end); the writer's longest gap {gap_s}")
    print(f"{cluster}:   samples with two writable nodes: {two}, with two nodes answering /primary 200: {two_api}"
          f" (of {len(times)}); acknowledged writes {len(ids)}, missing afterwards {len(ids - got)}")
    print(f"{cluster}:   one writable node answering /primary 200: {t_api} after SIGCONT")

if __name__ == "__main__":
    {"writer": writer, "sampler": sampler, "report": report}[sys.argv[1]](*sys.argv[2:])
EOPY

conditions
echo "# build $(build_commit) ($BIN, release); both clusters: $TIMING; Patroni: failsafe_mode: ${PATRONI_FAILSAFE:-true};" \
  "tenure: ${TENURE_DCS:-its default (no failsafe key in its config)}"
echo "# outage ${OUTAGE_S} s (both etcds SIGSTOPped at once), ${SETTLE_S} s after the clusters settled; writers stop ${AFTER_S} s after SIGCONT"
for r in $(seq 1 "$RUNS"); do
  for _ in $(seq 1 180); do healthy && break; sleep 1; done
  healthy || { echo "run $r: the clusters did not settle"; exit 1; }
  declare -A P0 WPID
  nodes=()
  for s in tenure patroni; do
    P0[$s]=$(primary_of "$s")
    sql "${PORT[$s.${P0[$s]}]}" "create table if not exists bench(id bigint primary key)" >/dev/null
    dsn="host=127.0.0.1,127.0.0.1,127.0.0.1 port=${PORT[$s.1]},${PORT[$s.2]},${PORT[$s.3]} user=postgres password=secret dbname=postgres target_session_attrs=read-write"
    /usr/bin/python3 "$W/outage.py" writer "$dsn" $((r * 1000000)) 0.05 >"$W/acks.$s.$r" 2>"$W/writer.$s.$r.err" &
    WPID[$s]=$!
    for i in 1 2 3; do nodes+=("$s.$i:${PORT[$s.$i]}:${APIP[$s.$i]}"); done
  done
  /usr/bin/python3 "$W/outage.py" sampler "${nodes[@]}" >"$W/samples.$r" 2>"$W/sampler.$r.err" &
  SPID=$!
  sleep "$SETTLE_S"
  echo "# run $r: load average before the outage: $(cut -d' ' -f1-3 /proc/loadavg)"
  t_stop=$(date +%s%3N)
  kill -STOP "${ETCD_PID[etcd-tenure]}" "${ETCD_PID[etcd-patroni]}"
  sleep "$OUTAGE_S"
  kill -CONT "${ETCD_PID[etcd-tenure]}" "${ETCD_PID[etcd-patroni]}"
  t_cont=$(date +%s%3N)
  # How long after the store returned exactly one node is writable and answers GET /primary with 200.
  declare -A API_OK=()
  while [ $(( $(date +%s%3N) - t_cont )) -lt $((AFTER_S * 1000)) ]; do
    for s in tenure patroni; do
      [ -n "${API_OK[$s]:-}" ] && continue
      p=$(primary_of "$s")
      [ "$(wc -w <<<"$p")" = 1 ] && [ "$(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://127.0.0.1:${APIP[$s.$p]}/primary")" = 200 ] &&
        API_OK[$s]="$(( $(date +%s%3N) - t_cont )) ms"
    done
    sleep 0.05
  done
  t_end=$(date +%s%3N)
  kill -TERM "${WPID[tenure]}" "${WPID[patroni]}" "$SPID"; wait "${WPID[tenure]}" "${WPID[patroni]}" "$SPID" 2>/dev/null || true
  echo "# run $r: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  for s in tenure patroni; do
    p=$(primary_of "$s")
    if [ "$(wc -w <<<"$p")" = 1 ]; then sql "${PORT[$s.$p]}" "select id from bench" >"$W/present.$s.$r"
    else echo "$s: not one primary after the run ($p)"; : >"$W/present.$s.$r"; fi
    /usr/bin/python3 "$W/outage.py" report "$s" "$W/samples.$r" "$W/acks.$s.$r" "$W/present.$s.$r" \
      "$t_stop" "$t_cont" "$t_end" "${P0[$s]}" "$([ $s = tenure ] && echo pg || echo p)${P0[$s]}" "${API_OK[$s]:-never within ${AFTER_S} s}"
  done
  # Whether the failsafe rounds ran: the leaders' log lines that say so (both agents word it as Patroni does).
  echo "# run $r: log lines 'failsafe mode is enabled': tenure $(cat "$W"/tenure/agent*.log | grep -c 'failsafe mode is enabled' || true)," \
    "Patroni $(cat "$W"/patroni/p*/patroni.log | grep -c 'failsafe mode is enabled' || true) (cumulative over runs)"
done
