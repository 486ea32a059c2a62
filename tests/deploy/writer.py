#!/usr/bin/python3
"""A writer through HAProxy for the deployment test: inserts increasing ids into tenure_writes, one
transaction each, every INTERVAL seconds, until SIGTERM. Every acknowledged commit is appended to ACKED as
"<id> <unix time>"; every client error to ACKED.errors as "<unix time> <kind> <message>", kind being
`connect` (a connection attempt failed), `tx` (a transaction failed, the connection still open) or `broken`
(a transaction failed and the connection with it). Reconnects after any error. The role and database:
$TENURE_TEST_PGUSER and $TENURE_TEST_PGDATABASE (default postgres)."""
import os
import signal
import sys
import time

import psycopg2

host, port, password, acked_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
interval_s = float(sys.argv[5]) if len(sys.argv) > 5 else 0.05
user = os.environ.get("TENURE_TEST_PGUSER", "postgres")
dbname = os.environ.get("TENURE_TEST_PGDATABASE", "postgres")
stop = False


def on_term(_signum, _frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
next_id = 1
conn = None
with open(acked_path, "a", buffering=1) as acked, open(acked_path + ".errors", "a", buffering=1) as errors:
    def error(kind, e):
        msg = " ".join(str(e).split())[:200] or type(e).__name__
        errors.write(f"{time.time():.3f} {kind} {msg}\n")

    while not stop:
        if conn is None:
            try:
                conn = psycopg2.connect(host=host, port=port, user=user, password=password, dbname=dbname,
                                        connect_timeout=2)
                conn.autocommit = True
            except Exception as e:
                error("connect", e)
                conn = None
                time.sleep(interval_s)
                continue
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO tenure_writes (id) VALUES (%s)", (next_id,))
            acked.write(f"{next_id} {time.time():.3f}\n")
        except Exception as e:  # not acknowledged; reconnect and try the next id
            error("broken" if conn.closed else "tx", e)
            try:
                conn.close()
            except Exception:
                pass
            conn = None
        next_id += 1
        time.sleep(interval_s)
