#!/usr/bin/env bash
# Where a process's resident pages are: Rss, Pss and Anonymous kB summed per mapping from /proc/PID/smaps,
# the mapped files by name (the binary's text, read-only data and relocated data apart), the heap, the
# thread stacks and other anonymous memory. Usage: bench/rss_map.sh PID... (footprint.sh calls it for
# tenure's agents at the window's end).
set -euo pipefail
for pid in "$@"; do
  /usr/bin/python3 - "$pid" <<'EOPY'
import re, sys
pid = sys.argv[1]
rows, cur = {}, None
for line in open(f"/proc/{pid}/smaps"):
    m = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S{4}) \S+ \S+ \d+\s*(.*)$", line)
    if m:
        perms, path = m.group(1), m.group(2).strip()
        if path.startswith("/"):
            name = f"{path.rsplit('/', 1)[-1]} ({perms})"
        elif path in ("[heap]", "[stack]", "[vdso]", "[vvar]"):
            name = path
        else:
            name = "anonymous (thread stacks, arenas)" if perms.startswith("rw") else f"anonymous ({perms})"
        cur = rows.setdefault(name, [0, 0, 0])
        continue
    k = line.split(":")[0]
    if cur is not None and k in ("Rss", "Pss", "Anonymous"):
        cur[("Rss", "Pss", "Anonymous").index(k)] += int(line.split()[1])
cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:70]
total = [sum(r[i] for r in rows.values()) for i in range(3)]
print(f"# pages of {pid} ({cmd}): Rss {total[0]} kB, Pss {total[1]} kB, anonymous {total[2]} kB")
print(f"{'mapping':44} {'Rss kB':>7} {'Pss kB':>7} {'anon kB':>7}")
for name, (rss, pss, anon) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
    if rss:
        print(f"{name[:44]:44} {rss:7} {pss:7} {anon:7}")
EOPY
done
