#!/usr/bin/env bash
# Idle footprint side by side (issue 30), from one run on one machine: tenure (3 nodes, release build), Patroni
# 3.0.2 (3 nodes) and pg_auto_failover 2.0 (a monitor and two keepers), all running at once and idle. tenure and
# Patroni each on an etcd of their own, same timing (ttl 10, loop_wait 1, retry_timeout RETRY=2); pg_auto_failover
# at its defaults. For each agent, summed over its own processes (tenure: the agent, and its fencing process apart;
# Patroni: its process; pg_autoctl: its process tree), never PostgreSQL's: CPU seconds per minute over the window
# (utime + stime of every thread, plus children they reaped in it, from /proc/PID/stat) and RSS, anonymous and
# file-backed (/proc/PID/status, at the end; PSS from smaps_rollup beside it, since RSS counts pages shared
# between processes once per process). Also each etcd's own CPU and RSS, and the store requests per idle
# cycle from each etcd's /metrics (grpc_server_started_total and grpc_server_msg_received_total by method,
# sampled at the window's ends; one etcd per cluster, so the counts are the cluster's; per node = / 3).
# Usage: bench/footprint.sh [window_s=120] [warmup_s=30]. Needs root, etcd, PostgreSQL 15, and
# `scripts/install-deps bench` (patroni, pg_auto_failover). NO_BUILD=1 reuses the release binary.
set -euo pipefail
source "$(dirname "$0")/peers.sh"
WINDOW=${1:-120}
WARMUP=${2:-30}
LOOP_WAIT=1
TIMING="ttl: 10, loop_wait: $LOOP_WAIT, retry_timeout: ${RETRY:-2}"
command -v pg_autoctl >/dev/null && [ -x /usr/bin/patroni ] || { echo "run scripts/install-deps bench" >&2; exit 1; }

start_etcd etcd-tenure
start_etcd etcd-patroni
tenure_cluster etcd-tenure "$TIMING"
patroni_cluster etcd-patroni "$TIMING"
paf_cluster
roles() { local i n; for i in 1 2 3; do echo "tenure pg$i $(pg_role "${T_DATA[$i]}")"; echo "patroni p$i $(pg_role "${P_DATA[$i]}")"; done
  for n in n1 n2; do echo "paf $n $(pg_role "${A_DATA[$n]}")"; done; echo "paf monitor monitor"; }
# Healthy: one primary and two replicas in each of tenure and Patroni, a primary and a secondary in pg_auto_failover.
healthy() { local r; r=$(roles)
  for s in tenure patroni; do
    [ "$(grep -c "^$s .* primary$" <<<"$r")" = 1 ] && [ "$(grep -c "^$s .* replica$" <<<"$r")" = 2 ] || return 1; done
  grep -q "^paf n1 primary$" <<<"$r" && grep -q "^paf n2 replica$" <<<"$r" &&
    [ "$(paf_state | grep -cE '\| +(primary|secondary) +\| +(primary|secondary) *$')" = 2 ]; }
for _ in $(seq 1 180); do healthy && break; sleep 1; done
healthy || { echo "the clusters did not settle:"; roles; paf_state; tail -3 "$W"/tenure/agent*.log "$W"/patroni/p*/patroni.log; exit 1; }
echo "# settled; warm-up ${WARMUP} s, then a window of ${WINDOW} s"
sleep "$WARMUP"
roles >"$W/roles.start"
# units: system node part kind pid [excluded pids]. tree = the process and its descendants but PostgreSQL's
# (and the excluded); one = the process alone; pgworkers = the postmaster's children named by pg_auto_failover.
units() {
  local i n pm
  for i in 1 2 3; do
    echo "tenure pg$i agent tree ${T_AGENT[$i]} $(t_fencer "$i")"
    f=$(t_fencer "$i"); if [ -n "$f" ]; then echo "tenure pg$i fencer one $f"; fi
  done
  for i in 1 2 3; do echo "patroni p$i agent tree ${P_AGENT[$i]}"; done
  for n in monitor n1 n2; do echo "paf $n pg_autoctl tree ${A_AGENT[$n]}"; done
  pm=$(head -1 "${A_DATA[monitor]}/postmaster.pid")
  echo "paf monitor pg-side pgworkers $pm"
  echo "store tenure etcd one ${ETCD_PID[etcd-tenure]}"
  echo "store patroni etcd one ${ETCD_PID[etcd-patroni]}"
}
units >"$W/units"
cat >"$W/measure.py" <<'EOPY'
import os, re, sys, time, urllib.request
units_file, roles_start, roles_end_cmd, window, loop_wait, tenure_url, patroni_url = sys.argv[1:8]
window, loop_wait = float(window), float(loop_wait)
HZ = os.sysconf("SC_CLK_TCK")
POSTGRES = "/usr/lib/postgresql/15/bin/postgres"

def procs():
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            r = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            st = {k: int(v.split()[0]) for k, v in (l.split(":", 1) for l in open(f"/proc/{d}/status") if l.startswith(("VmRSS", "RssAnon", "RssFile", "RssShmem")))}
            try:
                exe = os.readlink(f"/proc/{d}/exe")
            except OSError:
                exe = ""
            cmd = open(f"/proc/{d}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            pss = next((int(l.split()[1]) for l in open(f"/proc/{d}/smaps_rollup") if l.startswith("Pss:")), 0)
        except (OSError, IndexError):
            continue
        # stat fields after the name: state ppid ... utime(14) stime(15) cutime(16) cstime(17) ... starttime(22)
        out[int(d)] = dict(ppid=int(r[1]), ticks=int(r[11]) + int(r[12]), cticks=int(r[13]) + int(r[14]),
                           start=int(r[19]), exe=exe, cmd=cmd, Pss=pss, **st)
    return out

def members(ps, kind, pid, excl):
    kids = {}
    for p, v in ps.items():
        kids.setdefault(v["ppid"], []).append(p)
    if kind == "one":
        return [pid] if pid in ps else []
    if kind == "pgworkers":  # the monitor extension's workers and the keepers' sessions on the monitor
        return [p for p in kids.get(pid, []) if re.search(r"pg_auto_failover monitor$|healthcheck worker|autoctl_node", ps[p]["cmd"])]
    out, queue = [], [pid] if pid in ps else []
    while queue:
        p = queue.pop()
        if p in excl or ps[p]["exe"].startswith(POSTGRES):
            continue
        out.append(p)
        queue.extend(kids.get(p, []))
    return out

def metrics(url):
    got = {}
    for line in urllib.request.urlopen(url + "/metrics", timeout=5).read().decode().splitlines():
        m = re.match(r'(grpc_server_started_total|grpc_server_msg_received_total)\{(.*)\} (\S+)', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            got[(m.group(1), labels["grpc_method"], labels["grpc_type"])] = float(m.group(3))
    return got

units = [l.split() for l in open(units_file) if l.strip()]
before, m0 = procs(), {u: metrics(u) for u in (tenure_url, patroni_url)}
t0 = time.monotonic()
time.sleep(window)
after, m1 = procs(), {u: metrics(u) for u in (tenure_url, patroni_url)}
elapsed = time.monotonic() - t0
roles0 = {tuple(l.split()[:2]): l.split()[2] for l in open(roles_start)}
roles1 = {tuple(l.split()[:2]): l.split()[2] for l in os.popen(roles_end_cmd).read().splitlines()}

def role(system, node):
    a, b = roles0.get((system, node), "-"), roles1.get((system, node), "-")
    return a if a == b else f"{a}->{b}"

def mib(kb):
    return kb / 1024

print(f"# window {elapsed:.1f} s; CPU = (utime + stime of the processes, all threads, and of children they reaped) / window")
hdr = f"{'system':8} {'node':8} {'process':12} {'role':8} {'CPU s/min':>9} {'RSS MiB':>8} {'anon':>6} {'file':>6} {'PSS':>6} {'procs':>5}"
print(hdr)
totals = {}
for u in units:
    system, node, part, kind, pid = u[:5]
    excl = {int(x) for x in u[5:]}
    ps = members(after, kind, int(pid), excl)
    cpu = rss = anon = file = pss = 0
    for p in ps:
        v = after[p]
        b = before.get(p)
        same = b is not None and b["start"] == v["start"]
        cpu += (v["ticks"] + v["cticks"]) - ((b["ticks"] + b["cticks"]) if same else 0)
        rss += v.get("VmRSS", 0); anon += v.get("RssAnon", 0); file += v.get("RssFile", 0); pss += v["Pss"]
    s_min = cpu / HZ / elapsed * 60
    label = {"pg-side": "pg-workers"}.get(part, part)
    r = role(system, node) if system != "store" else "store"
    if part == "pg-side":
        r = "monitor"
    print(f"{system:8} {node:8} {label:12} {r:8} {s_min:9.3f} {mib(rss):8.1f} {mib(anon):6.1f} {mib(file):6.1f} {mib(pss):6.1f} {len(ps):5}")
    # A process tree's members one by one (pg_autoctl: its supervisor, the Postgres controller, the keeper or
    # the monitor listener), so a figure for one of them can be compared with the tree's.
    for p in (ps if kind == "tree" and len(ps) > 1 else []):
        v, b = after[p], before.get(p)
        c = (v["ticks"] + v["cticks"]) - ((b["ticks"] + b["cticks"]) if b is not None and b["start"] == v["start"] else 0)
        name = v["cmd"].split(": ", 1)[1].strip() if v["cmd"].startswith("pg_autoctl: ") else "supervisor"
        print(f"{'':8} {'':8} {('  ' + name)[:21]:21} {c / HZ / elapsed * 60:9.3f} {mib(v.get('VmRSS', 0)):8.1f}"
              f" {mib(v.get('RssAnon', 0)):6.1f} {mib(v.get('RssFile', 0)):6.1f} {mib(v['Pss']):6.1f}")
    if system == "tenure":
        t = totals.setdefault(node, [0, 0, 0, 0, 0])
        t[0] += s_min; t[1] += rss; t[2] += anon; t[3] += file; t[4] += pss
for node, t in totals.items():
    print(f"{'tenure':8} {node:8} {'agent+fencer':12} {role('tenure', node):8} {t[0]:9.3f} {mib(t[1]):8.1f} {mib(t[2]):6.1f} {mib(t[3]):6.1f} {mib(t[4]):6.1f}")

cycles = elapsed / loop_wait
print(f"\n# store requests per idle cycle per node, from each cluster's own etcd (/metrics): delta over the window"
      f" / ({elapsed:.0f} s / loop_wait {loop_wait:g} s = {cycles:.0f} cycles) / 3 nodes")
print(f"{'cluster':8} {'method':22} {'type':16} {'calls/cycle/node':>16} {'msgs/cycle/node':>15}")
for name, url in (("tenure", tenure_url), ("patroni", patroni_url)):
    keys = sorted({(k[1], k[2]) for k in m1[url]})
    tot_calls = tot_msgs = 0
    for method, typ in keys:
        c = m1[url].get(("grpc_server_started_total", method, typ), 0) - m0[url].get(("grpc_server_started_total", method, typ), 0)
        g = m1[url].get(("grpc_server_msg_received_total", method, typ), 0) - m0[url].get(("grpc_server_msg_received_total", method, typ), 0)
        if c == 0 and g == 0:
            continue
        tot_calls += c; tot_msgs += g
        print(f"{name:8} {method:22} {typ:16} {c / cycles / 3:16.2f} {g / cycles / 3:15.2f}")
    print(f"{name:8} {'all':22} {'':16} {tot_calls / cycles / 3:16.2f} {tot_msgs / cycles / 3:15.2f}")
EOPY
conditions
echo "# build $(build_commit) ($BIN, release); tenure and Patroni: $TIMING; pg_auto_failover 2.0 at its defaults"
echo "# load average at the window's start: $(cut -d' ' -f1-3 /proc/loadavg)"
# The roles at the end, read by measure.py when the window closes.
cat >"$W/roles.sh" <<EOS
$(declare -f as_pg pg_role roles)
W=$W PGBIN=$PGBIN
$(declare -p T_DATA P_DATA A_DATA)
roles
EOS
/usr/bin/python3 "$W/measure.py" "$W/units" "$W/roles.start" "bash $W/roles.sh" "$WINDOW" "$LOOP_WAIT" \
  "${ETCD_URL[etcd-tenure]}" "${ETCD_URL[etcd-patroni]}"
echo "# load average at the window's end: $(cut -d' ' -f1-3 /proc/loadavg)"
# Where tenure's pages are (the agents' 8 MiB goal): per mapping, at the window's end.
"$ROOT/bench/rss_map.sh" "${T_AGENT[1]}" "${T_AGENT[2]}" "${T_AGENT[3]}"
