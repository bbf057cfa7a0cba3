"""Builds a dict and a list of N strings (about 250 B of memory per entry: N = 1.3M is
~325 MiB), then reads a seventh of them back through the dict and prints their digest,
the counts, and nothing else (a run's output is the same under any swap)."""
import hashlib
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_300_000
table = {}
items = []
for i in range(n):
    value = ("%d-" % i) * 8
    table[i] = value
    items.append(value)
digest = hashlib.sha256()
for i in range(0, n, 7):
    digest.update(table[i].encode())
print(len(table), len(items), digest.hexdigest())
