#!/usr/bin/python3
"""A writer through HAProxy for the deployment test: inserts increasing ids into tenure_writes, one
transaction each, every INTERVAL seconds, until SIGTERM. Every acknowledged commit is appended to ACKED as
"<id> <unix time>"; reconnects after any error (a failover cuts the session). The role: $TENURE_TEST_PGUSER
(default postgres)."""
import os
import signal
import sys
import time

import psycopg2

host, port, password, acked_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
interval_s = float(sys.argv[5]) if len(sys.argv) > 5 else 0.05
stop = False


def on_term(_signum, _frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
next_id = 1
conn = None
with open(acked_path, "a", buffering=1) as acked:
    while not stop:
        try:
            if conn is None:
                conn = psycopg2.connect(host=host, port=port, user=os.environ.get("TENURE_TEST_PGUSER", "postgres"), password=password,
                                        dbname="postgres", connect_timeout=2)
                conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SET statement_timeout = '3s'")
                cur.execute("INSERT INTO tenure_writes (id) VALUES (%s)", (next_id,))
            acked.write(f"{next_id} {time.time():.3f}\n")
        except Exception:  # any failure: not acknowledged; reconnect and try the next id
            try:
                if conn is not None:
                    conn.close()
            except Exception:
                pass
            conn = None
        next_id += 1
        time.sleep(interval_s)
