"""A random graph of N nodes (default 400k) with D edges each (default 6) as Python
adjacency lists, a breadth-first search from node 0, and the nodes' degrees summed by
distance; prints the counts and a digest (the same under any swap)."""
import collections
import hashlib
import random
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 400_000
d = int(sys.argv[2]) if len(sys.argv) > 2 else 6
rng = random.Random(3)
edges = [[] for _ in range(n)]
for u in range(n):
    for _ in range(d):
        v = rng.randrange(n)
        edges[u].append(v)
        edges[v].append(u)
distance = [-1] * n
distance[0] = 0
queue = collections.deque([0])
while queue:
    u = queue.popleft()
    for v in edges[u]:
        if distance[v] < 0:
            distance[v] = distance[u] + 1
            queue.append(v)
by_distance = collections.Counter()
for u in range(n):
    by_distance[distance[u]] += len(edges[u])
digest = hashlib.sha256(repr(sorted(by_distance.items())).encode())
print(n, sum(1 for x in distance if x >= 0), digest.hexdigest())
