#!/usr/bin/env python3
"""Popen + wait of a tiny program: CPython's subprocess vs spawnkit.subprocess, in one run.

    .venv/bin/python bench/python_popen.py [--runs 500] [--json out.json] [--small-only]

The two rows run interleaved (one spawn of each per round, order alternating) so drift on a
shared machine hits both alike; each timing covers ``Popen([tiny]).wait()``. The parent runs
once small and once holding 1 GiB of touched memory. The tiny program is a 129-byte static
ELF that only calls exit(0) (written to a temporary directory; --program picks another), so
the child's own run time does not drown the spawn cost. Prints min and median per row and
the ratio CPython / spawnkit (> 1: spawnkit is faster); --json writes the same numbers.
"""

import argparse
import gc
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from spawnkit import subprocess as sk_subprocess


def tiny_elf():
    """A minimal static ELF executable that calls exit(0), for x86_64 and aarch64."""
    machine = platform.machine()
    if machine == "x86_64":
        code = bytes([0x31, 0xFF, 0xB8, 0x3C, 0, 0, 0, 0x0F, 0x05])  # xor edi,edi; exit; syscall
        e_machine = 62
    elif machine == "aarch64":
        code = struct.pack("<III", 0xD2800000, 0xD2800BA8, 0xD4000001)  # x0=0; x8=93; svc 0
        e_machine = 183
    else:
        return None
    base, ehsize, phsize = 0x400000, 64, 56
    entry = base + ehsize + phsize
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, e_machine, 1, entry, ehsize, 0, 0,
                                 ehsize, phsize, 1, 0, 0, 0)
    size = ehsize + phsize + len(code)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)
    return header + phdr + code


def measure(program, runs, label):
    rows = {"CPython subprocess": subprocess.Popen, "spawnkit.subprocess": sk_subprocess.Popen}
    times = {name: [] for name in rows}
    items = list(rows.items())
    for _ in range(max(10, runs // 20)):  # warm up both
        for _, popen in items:
            popen([program]).wait()
    gc.disable()
    try:
        for i in range(runs):
            order = items if i % 2 == 0 else items[::-1]
            for name, popen in order:
                t = time.perf_counter()
                popen([program]).wait()
                times[name].append(time.perf_counter() - t)
            if sys.stderr.isatty() and i % 50 == 0:
                print(f"\r{label}: {i}/{runs}", end="", file=sys.stderr)
    finally:
        gc.enable()
    if sys.stderr.isatty():
        print("\r" + " " * 40 + "\r", end="", file=sys.stderr)
    result = {}
    for name, ts in times.items():
        result[name] = {"min_us": min(ts) * 1e6, "median_us": statistics.median(ts) * 1e6}
    cp, skr = result["CPython subprocess"], result["spawnkit.subprocess"]
    result["ratio_min"] = cp["min_us"] / skr["min_us"]
    result["ratio_median"] = cp["median_us"] / skr["median_us"]
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=500, help="spawns per row and parent size")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--program", help="program to spawn (default: a tiny static ELF)")
    ap.add_argument("--small-only", action="store_true", help="skip the 1 GiB parent")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        program = args.program
        if program is None:
            elf = tiny_elf()
            if elf is None:
                program = "/bin/true"
            else:
                program = os.path.join(tmp, "tiny")
                with open(program, "wb") as f:
                    f.write(elf)
                os.chmod(program, 0o755)
        out = {
            "program": args.program or ("tiny static ELF (exit 0)" if program != "/bin/true"
                                        else "/bin/true"),
            "runs": args.runs,
            "python": platform.python_version(),
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d"),
            "parents": {},
        }
        print(f"Popen([tiny]).wait(), {args.runs} runs per row, interleaved; times in µs")
        print(f"python {out['python']}, kernel {out['kernel']}, {out['cpus']} cpus")
        parents = [("small parent", 0)]
        if not args.small_only:
            parents.append(("1 GiB touched", 1 << 30))
        for label, size in parents:
            ballast = bytearray(b"\x01") * size if size else None  # every page written
            res = measure(program, args.runs, label)
            del ballast
            out["parents"][label] = res
            print(f"\n{label}")
            print(f"  {'row':<22}{'min':>10}{'median':>10}")
            for name in ("CPython subprocess", "spawnkit.subprocess"):
                r = res[name]
                print(f"  {name:<22}{r['min_us']:>10.1f}{r['median_us']:>10.1f}")
            print(f"  CPython / spawnkit: {res['ratio_min']:.2f}x (min), "
                  f"{res['ratio_median']:.2f}x (median)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)
            print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
