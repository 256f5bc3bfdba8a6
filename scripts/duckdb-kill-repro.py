#!/usr/bin/env python3
"""DuckDB alone (no efmesh) leaves its database file unreadable when a process is SIGKILLed
while it writes: a reproduction for an upstream report (docs/benchmark.md, "The kill test
without autocommit: a corrupt DuckDB file too"; SPEC §4 invariant 8).

A child process runs "commands" forever: open the file, build tables in explicit transactions
(DROP, CREATE TABLE AS, DELETE, INSERT, COMMENT ON, COMMIT), replace views, close (DuckDB
checkpoints on close). The parent kills it with SIGKILL after a random delay, copies the files
as the kill left them, and opens the database (read-write, then read-only, reading every table
and view). A process kill loses no completed write (no OS crash, no fsync question): any state
a kill leaves should open. On DuckDB 1.5.5 (pip install duckdb==1.5.5), about one kill in a
thousand leaves `Corrupt database file: computed checksum … does not match stored checksum …`,
the file itself unreadable without its WAL, e.g. after a kill during the close's checkpoint.

Usage: duckdb-kill-repro.py DIR SEED KILLS
Environment: CONNS=1|2 (connections building at once, default 1), CKPT=none|seq|concurrent
(an explicit CHECKPOINT before the close: none; alone; beside a catalog read on a second
cursor; default none). On corruption it prints CORRUPT and the phase the kill landed in, keeps
DIR-pre-corrupt-* (the files as the kill left them) and exits 2.
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import duckdb

DIR, SEED, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(DIR, exist_ok=True)
DB = os.path.join(DIR, "t.duckdb")
PHASE_FILE = DB + ".phase"
CONNS = int(os.environ.get("CONNS", "1"))
CKPT = os.environ.get("CKPT", "none")
CATALOG = (
    "SELECT schema_name, view_name, comment, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary "
    "UNION ALL SELECT schema_name, table_name, comment, NULL FROM duckdb_tables() WHERE NOT temporary"
)
phase_fd = None


def phase(text):
    """Where the child is, for the parent to read after the kill (a write to the page cache)."""
    if phase_fd is not None:
        os.pwrite(phase_fd, (text + " " * 40)[:40].encode(), 0)


def build(con, rnd, k, tag):
    for _ in range(k):
        t = f"phys.t_{tag}_{rnd.randrange(40)}"
        con.execute("BEGIN")
        con.execute(f"DROP TABLE IF EXISTS {t}")
        con.execute(f"CREATE TABLE {t} AS SELECT range AS id, range * {rnd.randrange(100)} AS v, 'x' || range AS s FROM range({rnd.randrange(1, 5000)})")
        if rnd.random() < 0.5:
            con.execute(f"DELETE FROM {t} WHERE id % 7 = 0")
            con.execute(f"INSERT INTO {t} SELECT range, range, 'y' FROM range({rnd.randrange(1, 3000)})")
        con.execute(f"COMMENT ON TABLE {t} IS 'fp {rnd.random()}'")
        con.execute("COMMIT")
        con.execute(f"CREATE OR REPLACE VIEW env.v_{tag}_{rnd.randrange(40)} AS SELECT * FROM {t}")


def command(i):
    rnd = random.Random(SEED * 100000 + i)
    phase(f"{i} open")
    con = duckdb.connect(DB)
    phase(f"{i} build")
    con.execute("CREATE SCHEMA IF NOT EXISTS phys; CREATE SCHEMA IF NOT EXISTS env")
    other = con.cursor()
    if CONNS == 2:
        th = threading.Thread(target=build, args=(other, random.Random(rnd.random()), rnd.randrange(1, 8), "b"))
        th.start()
        build(con, rnd, rnd.randrange(1, 8), "a")
        th.join()
    else:
        build(con, random.Random(rnd.random()), rnd.randrange(1, 8), "b")
        build(con, rnd, rnd.randrange(1, 8), "a")
    phase(f"{i} checkpoint")
    read = threading.Thread(target=lambda: other.execute(CATALOG).fetchall())
    if CKPT == "seq":
        con.execute("CHECKPOINT")
        read.start()
        read.join()
    elif CKPT == "concurrent":
        read.start()
        con.execute("CHECKPOINT")
        read.join()
    phase(f"{i} close")
    other.close()
    con.close()
    phase(f"{i} closed")


def verify(where):
    try:
        duckdb.connect(DB).close()
        c = duckdb.connect(DB, read_only=True)
        for s, n in c.execute("SELECT schema_name, table_name FROM duckdb_tables()").fetchall():
            c.execute(f'SELECT * FROM "{s}"."{n}"').fetchall()
        for s, n in c.execute("SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal").fetchall():
            try:
                c.execute(f'SELECT count(*) FROM "{s}"."{n}"').fetchall()
            except duckdb.CatalogException:
                pass  # a view over a table another build dropped
        c.close()
    except Exception as e:  # noqa: BLE001 — any failure to read is the finding
        keep = f"{DIR}-pre-corrupt-{SEED}-{int(time.time())}"
        shutil.copytree(DIR + "-pre", keep)
        print(f"CORRUPT seed {SEED} {where}: {e}\nthe files as the kill left them: {keep}", flush=True)
        sys.exit(2)


if len(sys.argv) > 4 and sys.argv[4] == "child":
    phase_fd = os.open(PHASE_FILE, os.O_RDWR | os.O_CREAT)
    i = 0
    while True:
        command(SEED * 1000000 + i)
        i += 1

for k in range(N):
    child = subprocess.Popen([sys.executable, __file__, DIR, str(SEED * 1000 + k), "0", "child"])
    time.sleep(random.Random(k).uniform(0.05, 1.5))
    child.send_signal(signal.SIGKILL)
    child.wait()
    landed = open(PHASE_FILE).read().strip() if os.path.exists(PHASE_FILE) else "?"
    shutil.rmtree(DIR + "-pre", ignore_errors=True)
    shutil.copytree(DIR, DIR + "-pre")
    verify(f"kill {k} (killed in phase: {landed})")
    if k % 50 == 0:
        print(f"seed {SEED} kill {k} ok", flush=True)
print(f"seed {SEED}: {N} kills, every state opened", flush=True)
