# Sourced first by every bench script that starts processes: re-executes the script as a child subreaper, so
# every process it starts (and every orphan of theirs: postmasters that pg_ctl detaches, the agents' fencers)
# stays its descendant and is stopped by PID on exit. Defines descendants, alive and stop_descendants.
[ -n "${BENCH_SUBREAPER:-}" ] || BENCH_SUBREAPER=1 exec /usr/bin/python3 -c '
import ctypes, os, sys
# PR_SET_CHILD_SUBREAPER (36): kept across execve, so bash below is the subreaper.
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
os.execv("/bin/bash", ["bash"] + sys.argv[1:])' "$0" "$@"
[ -z "${BENCH_TRACE:-}" ] || set -x

# Every descendant of this script, by PID (one ps snapshot), leaving out this query's own processes: the
# subshells bash forks for it (same command line as the script), ps and awk.
descendants() { ps -e -o pid=,ppid=,args= | awk -v root=$$ '
  { args = $0; sub(/^ *[0-9]+ +[0-9]+ /, "", args); kids[$2] = kids[$2] " " $1; cmd[$1] = args }
  END { n = split(kids[root], q, " "); for (i = 1; i <= n; i++) { m = split(kids[q[i]], k, " ");
        for (j = 1; j <= m; j++) q[++n] = k[j] }
        for (i = 1; i <= n; i++) if (cmd[q[i]] != cmd[root] && cmd[q[i]] !~ /^(ps -e|awk -v root)/) print q[i] }'; }
alive() { local p n=0; for p in "$@"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done; [ "$n" -gt 0 ]; }
# stop_descendants [STORE_PID...]: thaw the stores, SIGTERM every other descendant by PID (agents stop their
# PostgreSQL), wait up to 20 s, then the stores, then SIGKILL what is left.
stop_descendants() {
  local p others
  for p in "$@"; do kill -CONT "$p" 2>/dev/null; done
  others=$(for p in $(descendants); do [[ " $* " == *" $p "* ]] || echo "$p"; done)
  for p in $others; do kill -TERM "$p" 2>/dev/null; done
  # shellcheck disable=SC2086
  for _ in $(seq 1 40); do alive $others || break; sleep 0.5; done
  for p in "$@"; do kill -TERM "$p" 2>/dev/null; done
  sleep 1
  for p in $(descendants); do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
}
