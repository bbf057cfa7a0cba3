"""numpy over arrays of N million doubles each (default 3 arrays of 16M: 384 MiB): a
sort, an argsort-gather, cumulative sums and a matrix product of slices; prints a digest
of the results (the same under any swap)."""
import hashlib
import sys

import numpy as np

m = int(sys.argv[1]) if len(sys.argv) > 1 else 16
n = m * 1_000_000
rng = np.random.default_rng(11)
a = rng.random(n)
b = rng.random(n)
c = np.sort(a)
order = np.argsort(b, kind="stable")
d = a[order]
e = np.cumsum(d)
block = min(1024, int(n ** 0.5))
product = a[: block * block].reshape(block, block) @ b[: block * block].reshape(block, block)
digest = hashlib.sha256()
for array in (c[:: n // 4096], d[:: n // 4096], e[:: n // 4096], product.ravel()[:: 997]):
    digest.update(np.ascontiguousarray(array).tobytes())
print(n, digest.hexdigest())
