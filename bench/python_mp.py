"""The multiprocessing rows of `spawnkit bench mp` (Gregory P. Smith's method, CPython PR
#99309), run by the spawnkit binary.

For each start method (fork, forkserver, spawn, spawnkit) and each total N: start N processes
running a no-op, with at most 2 x CPUs + 1 alive at once (joining the oldest when full), and
report processes per second, ITERATIONS times (mean and standard deviation). Then the time to
the first result of a 4-worker Pool's map. All of it from this process as it starts ("0") and
holding a 1 GiB bytearray with every page written ("1GiB-touched"). Methods take turns.

Usage: python_mp.py TOTALS ITERATIONS [SIZE...]    (TOTALS comma-separated)
prints one JSON object on stdout.
"""

import json
import multiprocessing
import os
import statistics
import sys
import time

GIB = 1 << 30
METHODS = ["fork", "forkserver", "spawn", "spawnkit"]


def noop():
    pass


def rate(ctx, total, alive):
    procs = []
    t0 = time.perf_counter()
    for _ in range(total):
        if len(procs) >= alive:
            procs.pop(0).join()
        p = ctx.Process(target=noop)
        p.start()
        procs.append(p)
    for p in procs:
        p.join()
    return total / (time.perf_counter() - t0)


def first_map(ctx):
    t0 = time.perf_counter()
    with ctx.Pool(4) as pool:
        pool.map(abs, [1])
        first = time.perf_counter() - t0
    return first


def main():
    totals = [int(x) for x in sys.argv[1].split(",")]
    iterations = int(sys.argv[2])
    sizes = sys.argv[3:] or ["0", "1GiB-touched"]
    skipped = {}
    try:
        import spawnkit.multiprocessing  # noqa: F401
    except ImportError as e:
        METHODS.remove("spawnkit")
        skipped["spawnkit"] = f"spawnkit is not installed in {sys.executable}: {e}"
    alive = 2 * (os.cpu_count() or 1) + 1
    ctxs = {m: multiprocessing.get_context(m) for m in METHODS}
    # Warm up the servers (forkserver's and spawnkit's zygote) before anything is measured,
    # while this process is small: as a program using them would start them early.
    for m in ("forkserver", "spawnkit"):
        if m in ctxs:
            rate(ctxs[m], 4, alive)
    out = {"python": sys.version.split()[0], "alive": alive, "totals": totals,
           "iterations": iterations, "sizes": {}, "skipped": skipped}
    ballast = None
    for size in sizes:
        if size == "1GiB-touched":
            ballast = bytearray(GIB)
            ballast[::4096] = b"\x01" * (GIB // 4096)
        elif size != "0":
            raise SystemExit("unknown parent size " + size)
        rows = {m: {} for m in METHODS}
        for total in totals:
            got = {m: [] for m in METHODS}
            for i in range(iterations):
                order = METHODS if i % 2 == 0 else METHODS[::-1]
                for m in order:
                    got[m].append(rate(ctxs[m], total, alive))
            for m in METHODS:
                v = got[m]
                rows[m][str(total)] = {"mean": statistics.fmean(v),
                                       "sd": statistics.stdev(v) if len(v) > 1 else 0.0}
        first = {m: min(first_map(ctxs[m]) for _ in range(max(1, iterations)))
                 for m in METHODS}
        out["sizes"][size] = {"per_s": rows, "first_map_s": first}
    del ballast
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
