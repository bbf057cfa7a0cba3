"""Sorts N tuples (default 1.5M) of a pseudo-random integer and a string, then prints
the count and a digest of the sorted order (the same under any swap)."""
import hashlib
import random
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_500_000
rng = random.Random(42)
rows = [(rng.getrandbits(40), "r%d" % i) for i in range(n)]
rows.sort()
digest = hashlib.sha256()
for key, name in rows[:: max(1, n // 100_000)]:
    digest.update(b"%d %s;" % (key, name.encode()))
print(n, digest.hexdigest())
