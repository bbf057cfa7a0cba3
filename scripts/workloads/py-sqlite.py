"""Python's sqlite3 in memory: N rows (default 1.5M), an index, then range queries over
it; prints the counts and a digest of the answers (the same under any swap)."""
import hashlib
import random
import sqlite3
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_500_000
queries = int(sys.argv[2]) if len(sys.argv) > 2 else 3_000
db = sqlite3.connect(":memory:")
db.execute("PRAGMA cache_size = -262144")
db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER, v TEXT)")
rng = random.Random(7)
db.executemany("INSERT INTO t (k, v) VALUES (?, ?)",
               ((rng.getrandbits(32), "v%012d" % i) for i in range(n)))
db.execute("CREATE INDEX t_k ON t (k)")
digest = hashlib.sha256()
found = 0
for _ in range(queries):
    low = rng.getrandbits(32)
    rows = db.execute("SELECT id, v FROM t WHERE k BETWEEN ? AND ? ORDER BY k LIMIT 64",
                      (low, low + (1 << 20))).fetchall()
    found += len(rows)
    for row_id, value in rows:
        digest.update(b"%d:%s;" % (row_id, value.encode()))
print(n, queries, found, digest.hexdigest())
