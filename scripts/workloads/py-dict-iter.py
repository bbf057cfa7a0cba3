"""A dict of N string keys (default 800k) and a list of its values, then every entry
iterated and hashed; prints the counts and the digest (the same under any swap)."""
import hashlib
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 800_000
table = {}
values = []
for i in range(n):
    key = "key-%09d-%s" % (i, "k" * (i % 13))
    value = "value-%d-" % (i * 7919 % n) * 6
    table[key] = value
    values.append(value)
digest = hashlib.sha256()
for key, value in table.items():
    digest.update(key.encode())
    digest.update(value.encode())
for value in values:
    digest.update(value[:8].encode())
print(len(table), len(values), digest.hexdigest())
