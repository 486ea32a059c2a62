#!/usr/bin/python3
"""Compares the writer's acknowledged ids with what the primary (through HAProxy) has, and counts the writer's
client errors. Prints "acked=N lost=M max_gap_s=G gaps_over_1s=K failed_tx=T broken_conn=B failed_conn=C
client_errors=E" (G: the longest time between two consecutive acknowledgements, i.e. the write unavailability;
T, B, C: transactions that failed on an open connection, transactions that failed with their connection,
connection attempts that failed, from ACKED.errors; E = T + B + C). Optional SINCE (a unix time): the first ack
after it is also reported as first_ack_after_s. The role and database: $TENURE_TEST_PGUSER and
$TENURE_TEST_PGDATABASE (default postgres)."""
import os
import sys
import time

import psycopg2

host, port, password, acked_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
since = float(sys.argv[5]) if len(sys.argv) > 5 else None
acks = []
with open(acked_path) as f:
    for line in f:
        i, t = line.split()
        acks.append((int(i), float(t)))
errors = []
if os.path.exists(acked_path + ".errors"):
    with open(acked_path + ".errors") as f:
        errors = [line.rstrip("\n").split(" ", 2) for line in f if line.strip()]
# A verification read, not the measured figure (the writer's acks are): right after a failover HAProxy may
# not have marked the new primary up yet (its check: every 1 s, up after 2), so the read retries for 30 s.
deadline = time.monotonic() + 30
while True:
    try:
        conn = psycopg2.connect(host=host, port=port, user=os.environ.get("TENURE_TEST_PGUSER", "postgres"),
                                password=password, dbname=os.environ.get("TENURE_TEST_PGDATABASE", "postgres"),
                                connect_timeout=5)
        break
    except psycopg2.OperationalError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.5)
with conn.cursor() as cur:
    cur.execute("SELECT id FROM tenure_writes")
    present = {r[0] for r in cur.fetchall()}
lost = [i for i, _ in acks if i not in present]
gaps = [b[1] - a[1] for a, b in zip(acks, acks[1:])]
kinds = [e[1] for e in errors]
out = (f"acked={len(acks)} lost={len(lost)} max_gap_s={max(gaps) if gaps else 0:.2f}"
       f" gaps_over_1s={sum(g > 1.0 for g in gaps)}"
       f" failed_tx={kinds.count('tx')} broken_conn={kinds.count('broken')} failed_conn={kinds.count('connect')}"
       f" client_errors={len(errors)}")
if since is not None:
    after = [t for _, t in acks if t > since]
    out += f" first_ack_after_s={(after[0] - since) if after else -1:.2f}"
print(out)
if lost:
    print("lost ids: " + " ".join(map(str, lost[:50])), file=sys.stderr)
for e in errors[:5]:
    print("client error: " + " ".join(e), file=sys.stderr)
