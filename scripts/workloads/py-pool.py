"""Python's multiprocessing Pool of W forked workers (default 4), each task building
MIB MiB (default 100) of blocks and returning their digest; the parent checks every
result against its own computation and prints them (the same under any swap)."""
import hashlib
import multiprocessing
import sys

MIB = int(sys.argv[2]) if len(sys.argv) > 2 else 100


def build(task):
    blocks = [hashlib.sha256(b"%d-%d" % (task, i)).digest() * 128 for i in range(MIB * 256)]
    total = hashlib.sha256()
    for block in blocks:
        total.update(block)
    return task, total.hexdigest()


def expected(task):
    total = hashlib.sha256()
    for i in range(MIB * 256):
        total.update(hashlib.sha256(b"%d-%d" % (task, i)).digest() * 128)
    return task, total.hexdigest()


if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    multiprocessing.set_start_method("fork")
    with multiprocessing.Pool(workers) as pool:
        results = pool.map(build, range(2 * workers))
    assert results == [expected(task) for task in range(2 * workers)], "a worker's result is wrong"
    print(len(results), hashlib.sha256(repr(results).encode()).hexdigest())
