"""The Python rows of `spawnkit bench server`, run by the spawnkit binary.

A private spawn server (``spawnkit.Server()``) is forked first thing, while this interpreter is
small and has one thread; then, at each parent size ("0": as started, "1GiB-touched": holding a
1 GiB bytearray with every page written), three rows take turns in blocks of 10 spawns:

* ``py_subprocess`` -- CPython's ``subprocess.Popen``, for scale;
* ``py_local`` -- ``spawnkit.subprocess.Popen``, a local spawn (``use_server(None)``);
* ``py_server`` -- the same ``Popen`` call through the private server (``use_server(srv)``);
* ``py_spawn_call`` -- the engine's local spawn call alone (``Command.spawn_child``, what
  ``py_local``'s Popen calls), its CPU read around that call only (the read and the wait
  outside): the most of ``py_local``'s CPU a server could take off the caller. What is left
  (Popen's own Python, the read, the wait) is the floor under ``py_server``'s CPU.

Each spawn is timed as the Rust rows are (Triplett's method: the parent reads CLOCK_MONOTONIC,
the tiny child writes its own CLOCK_MONOTONIC to the pipe given as its stdout; the difference
is the latency), and the calling thread's own CPU time (its CPU clock, ``time.thread_time``:
the time ``getrusage(RUSAGE_THREAD)`` reports, but up to the instant of the call) is read
around each block: ``Popen`` plus ``wait``, per spawn. Then ``multiprocessing``'s forkserver
start method, for scale: a ``Process`` running a no-op, ``start()`` + ``join()`` (the
forkserver itself started before, outside the time).

Usage: python_server.py TINYCHILD RUNS FORKSERVER_RUNS [SIZE...]     prints JSON on stdout.
"""

import os
import sys

SERVER = None
IMPORT_ERROR = None
if __name__ == "__main__":  # not in the forkserver's children, which import this file again
    try:  # the server first: a fork of this process while it is small
        import spawnkit
        import spawnkit.subprocess as sks
        from spawnkit import _native

        SERVER = spawnkit.Server()
    except Exception as e:  # noqa: BLE001 - reported as the rows' skip reason
        IMPORT_ERROR = f"spawnkit is not usable in {sys.executable} ({type(e).__name__}: {e})"

import json  # noqa: E402
import multiprocessing  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

# The latency rows' own helpers (written beside this file by the spawnkit binary).
from python_rows import ballast, child_clock, once  # noqa: E402

BLOCK = 10


def thread_cpu_us():
    # CLOCK_THREAD_CPUTIME_ID: getrusage(RUSAGE_THREAD) stops at the scheduler's last
    # update of the thread (its last sleep), which shifts work between blocks.
    return time.thread_time_ns() / 1e3


def stats(ns, cpu_us, spawns):
    ns = sorted(ns)
    n = len(ns)
    median = ns[n // 2] if n % 2 else (ns[n // 2 - 1] + ns[n // 2]) / 2
    return {
        "min_us": ns[0] / 1e3,
        "median_us": median / 1e3,
        "mean_us": sum(ns) / n / 1e3,
        "runs": n,
        "caller_cpu_us": cpu_us / spawns,
    }


def spawn_call_once(prog, r, w):
    """One local spawn by the engine's call alone: (latency ns, the call's own CPU in us)."""
    cmd = _native.Command(prog, subprocess_rules=True)
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    c0 = thread_cpu_us()
    child = cmd.spawn_child(None, w, None)
    spent = thread_cpu_us() - c0
    return child_clock(prog, r, child.wait, t0), spent


def noop():
    pass


def forkserver_start(runs):
    ctx = multiprocessing.get_context("forkserver")
    warm = ctx.Process(target=noop)  # starts the forkserver itself
    warm.start()
    warm.join()
    ns = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        p = ctx.Process(target=noop)
        p.start()
        p.join()
        ns.append(time.perf_counter_ns() - t0)
        if p.exitcode != 0:
            raise SystemExit(f"forkserver: the no-op exited with {p.exitcode}")
    ns.sort()
    return {"min_us": ns[0] / 1e3, "median_us": ns[len(ns) // 2] / 1e3, "runs": len(ns)}


def main():
    prog, runs, fs_runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sizes = sys.argv[4:] or ["0", "1GiB-touched"]
    names = {
        "py_subprocess": "CPython subprocess.Popen",
        "py_local": "spawnkit.subprocess.Popen, local",
        "py_server": "spawnkit.subprocess.Popen, server",
        "py_spawn_call": "its spawn call alone (CPU: the call only)",
        "py_forkserver": "multiprocessing forkserver Process (no-op)",
    }
    skipped = {}
    rows = ["py_subprocess"]
    if SERVER is None:
        skipped["py_local"] = skipped["py_server"] = skipped["py_spawn_call"] = IMPORT_ERROR
    else:
        rows += ["py_local", "py_server", "py_spawn_call"]

    def popen_of(rid):
        if rid == "py_subprocess":
            return subprocess.Popen
        sks.use_server(SERVER if rid == "py_server" else None)
        return sks.Popen

    results = {rid: {} for rid in names}
    r, w = os.pipe()  # close-on-exec; each child gets w as its stdout
    for key in sizes:
        hold = ballast(key)
        ns = {rid: [] for rid in rows}
        cpu = {rid: 0.0 for rid in rows}
        for block in range((runs + BLOCK - 1) // BLOCK):
            for k in range(len(rows)):
                rid = rows[(block + k) % len(rows)]
                n = min(BLOCK, runs - len(ns[rid]))
                if rid == "py_spawn_call":
                    for _ in range(n):
                        lat, spent = spawn_call_once(prog, r, w)
                        ns[rid].append(lat)
                        cpu[rid] += spent
                    continue
                popen = popen_of(rid)
                c0 = thread_cpu_us()
                got = [once(popen, prog, r, w) for _ in range(n)]
                cpu[rid] += thread_cpu_us() - c0
                ns[rid] += got
        for rid in rows:
            results[rid][key] = stats(ns[rid], cpu[rid], len(ns[rid]))
        try:
            results["py_forkserver"][key] = forkserver_start(fs_runs)
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            skipped["py_forkserver"] = f"{type(e).__name__}: {e}"
        del hold
    if SERVER is not None:
        sks.use_server(None)
    out = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "rows": [
            {"id": rid, "name": name, "sizes": results[rid], "skipped": skipped.get(rid)}
            for rid, name in names.items()
        ],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
