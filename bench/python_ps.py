"""The Python rows of `spawnkit bench ps`, run by the spawnkit binary.

Times, in this one interpreter, the call a monitoring script makes to read the process table:
psutil's `process_iter(['pid', 'ppid', 'name'])` (each process's attributes read, as psutil
users do, into `p.info`) and `spawnkit.ps()`. Only the call is timed (the interpreter's start
is not); the two rows take turns, the starting row alternating. Before timing, one untimed call
of each is checked to list at least MIN processes and the herd's pid, so each row times a
complete listing.

Usage: python_ps.py RUNS MIN HERD_PID     prints one JSON object on stdout.
"""

import json
import sys
import time


def main():
    runs, minimum, herd = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    rows = {}
    calls = {}
    skipped = {}
    try:
        import psutil

        def psutil_rows():
            return [p.info for p in psutil.process_iter(["pid", "ppid", "name"])]

        calls["py_psutil"] = ("psutil.process_iter(['pid','ppid','name'])", psutil_rows,
                              lambda r: [x["pid"] for x in r])
        psutil_version = psutil.__version__
    except ImportError as e:
        skipped["py_psutil"] = f"psutil is not installed ({e})"
        psutil_version = None
    try:
        import spawnkit

        if not hasattr(spawnkit, "ps"):
            raise ImportError("this spawnkit package has no ps()")
        calls["py_spawnkit_ps"] = ("spawnkit.ps()", spawnkit.ps, lambda r: [p.pid for p in r])
        backend = getattr(spawnkit, "ps_backend", lambda: None)()
    except ImportError as e:
        skipped["py_spawnkit_ps"] = f"the spawnkit package is not installed here ({e})"
        backend = None
    listed = {}
    for key, (name, call, pids) in calls.items():
        got = pids(call())
        if len(got) < minimum or herd not in got:
            raise SystemExit(f"{name} listed {len(got)} processes (expected >= {minimum}, "
                             f"with pid {herd})")
        listed[key] = len(got)
        rows[key] = []
    keys = list(calls)
    for i in range(runs):
        order = keys if i % 2 == 0 else keys[::-1]
        for key in order:
            call = calls[key][1]
            t0 = time.perf_counter_ns()
            call()
            rows[key].append((time.perf_counter_ns() - t0) / 1e6)
    out = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "psutil": psutil_version,
        "spawnkit_backend": backend,
        "rows": [
            {"id": key, "name": calls[key][0], "runs_ms": rows[key], "listed": listed[key]}
            for key in keys
        ] + [{"id": key, "skipped": why} for key, why in skipped.items()],
    }
    json.dump(out, sys.stdout)


main()
