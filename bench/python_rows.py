"""The Python rows of `spawnkit bench` (latency method), run by the spawnkit binary.

Measures CPython's `subprocess.Popen` and, when the package is installed,
`spawnkit.subprocess.Popen` exactly as the Rust rows are measured: the parent reads
CLOCK_MONOTONIC, starts the tiny child (a bare name, found along PATH, whose first entry is the
directory holding it), reads the 16-byte CLOCK_MONOTONIC the child wrote to the pipe given as its
stdout, and records the difference; then it waits (outside the time). The two rows take turns
in blocks of 10 spawns, the starting row alternating, at each parent size: "0" (this process as it starts)
and "1GiB-touched" (this process holds a 1 GiB bytearray with every page written).

Usage: python_rows.py TINYCHILD RUNS [SIZE...]     prints one JSON object on stdout.
"""

import json
import os
import struct
import subprocess
import sys
import time

GIB = 1 << 30


def ballast(key):
    if key == "0":
        return None
    if key == "1GiB-touched":
        b = bytearray(GIB)  # calloc: untouched until written
        b[::4096] = b"\x01" * (GIB // 4096)  # one write per page
        return b
    raise SystemExit("unknown parent size " + key)


def once(popen, prog, r, w):
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    p = popen([prog], stdout=w)
    return child_clock(prog, r, p.wait, t0)


def child_clock(prog, r, wait, t0):
    """Read the 16-byte CLOCK_MONOTONIC the child writes to `r`, then `wait()` for it: the
    latency from `t0` (ns). Exits the script if the child wrote short or failed."""
    data = b""
    while len(data) < 16:
        chunk = os.read(r, 16 - len(data))
        if not chunk:
            break
        data += chunk
    code = wait()
    if len(data) != 16 or code != 0:
        raise SystemExit(f"{prog}: wrote {len(data)} bytes, exit status {code}")
    sec, nsec = struct.unpack("=qq", data)
    return sec * 1_000_000_000 + nsec - t0


def stats(ns):
    ns = sorted(ns)
    n = len(ns)
    median = ns[n // 2] if n % 2 else (ns[n // 2 - 1] + ns[n // 2]) / 2
    return {
        "min_us": ns[0] / 1e3,
        "median_us": median / 1e3,
        "mean_us": sum(ns) / n / 1e3,
        "runs": n,
    }


def main():
    prog, runs, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3:] or ["0", "1GiB-touched"]
    rows = [("py_subprocess", "CPython subprocess.Popen", subprocess.Popen, None)]
    try:
        import spawnkit.subprocess as sks

        rows.append(("py_spawnkit_subprocess", "spawnkit.subprocess.Popen", sks.Popen, None))
    except Exception as e:  # not built yet, or broken: say why
        rows.append(
            (
                "py_spawnkit_subprocess",
                "spawnkit.subprocess.Popen",
                None,
                f"the Python package is not installed for {sys.executable} ({type(e).__name__}: {e})",
            )
        )
    failed = {}  # a row that raises is reported as skipped, with the error; the others go on
    samples = {row[0]: {} for row in rows}
    r, w = os.pipe()  # close-on-exec; each child gets w as its stdout
    for key in sizes:
        hold = ballast(key)
        live = [row for row in rows if row[2] is not None and row[0] not in failed]
        ns = {row[0]: [] for row in live}
        # Rows take turns in blocks of 10 spawns, the starting row alternating (as on the
        # Rust side).
        for block in range((runs + 9) // 10):
            for k in range(len(live)):
                rid, _, popen, _ = live[(block + k) % len(live)]
                if rid in failed:
                    continue
                try:
                    for _ in range(min(10, runs - len(ns[rid]))):
                        ns[rid].append(once(popen, prog, r, w))
                except Exception as e:  # noqa: BLE001 - reported, not hidden
                    failed[rid] = f"{type(e).__name__}: {e}"
        for rid, v in ns.items():
            if rid not in failed and v:
                samples[rid][key] = stats(v)
        del hold
    out = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "rows": [
            {
                "id": rid,
                "name": name,
                "kind": "python",
                "sizes": {} if rid in failed else samples[rid],
                "skipped": failed.get(rid, skip),
            }
            for rid, name, _, skip in rows
        ],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
