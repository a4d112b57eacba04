"""Issue 16's reliability target: N actions (default 1,000) through a real BuildGrid farm with
two spawnkit workers, the server killed and started again in the middle. Every action must
come back once, whole (its exit code, stdout and output file); how many times each command
actually ran is counted too (REAPI allows a re-run after a server restart: at least once).

Usage: python3 bench/worker_restart.py [N] [RESTART_AFTER_S]
(after `cargo build --workspace --bins`; BuildGrid and PostgreSQL are installed as the tests do)
"""

import collections
import json
import pathlib
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
import buildgrid_farm  # noqa: E402


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    restart_after = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    farm = buildgrid_farm.Farm()
    try:
        for name in ("a", "b"):
            farm.start_worker(name)
        runs = farm.tmp / "runs.log"  # outside the fence's private /tmp: shared by the actions
        runs.touch()
        runs.chmod(0o666)
        specs = [{"name": f"r{i}",
                  "args": ["sh", "-c", f"echo {i} >> {runs}; echo {i} > o.txt; echo out {i}"],
                  "output_files": ["o.txt"]} for i in range(n)]
        out = {}
        t0 = time.monotonic()
        t = threading.Thread(target=lambda: out.setdefault("r", farm.execute(specs, timeout=3600)))
        t.start()
        time.sleep(restart_after)
        ran_before = len(runs.read_text().split())
        farm.stop_server()
        time.sleep(3)
        farm.start_server()
        t.join()
        wall = time.monotonic() - t0
        results = out.get("r") or []
        bad = []
        for i, r in enumerate(results):
            ok = ("error" not in r and r.get("code") == 0 and r.get("exit_code") == 0
                  and r.get("stdout") == f"out {i}\n"
                  and r.get("files", {}).get("o.txt", {}).get("text") == f"{i}\n")
            if not ok:
                bad.append((i, r))
        counts = collections.Counter(runs.read_text().split())
        summary = {
            "actions": n, "results": len(results), "whole_and_right": len(results) - len(bad),
            "lost_or_wrong": len(bad) + (n - len(results)),
            "ran_before_restart": ran_before, "restart_after_s": restart_after,
            "ran_twice": sum(1 for c in counts.values() if c > 1),
            # Of those, the ones whose Execute the client sent again (its stream broke before
            # the operation was named; BuildGrid may have queued the first one already): run
            # twice by the client's retry, not by a worker.
            "ran_twice_client_resent": sum(1 for k, c in counts.items()
                                           if c > 1 and int(k) < len(results)
                                           and results[int(k)].get("attempts", 1) > 1),
            "never_ran": n - len(counts), "wall_s": round(wall, 1),
            "first_bad": [f"{i}: {json.dumps(r)[:300]}" for i, r in bad[:3]],
        }
        print(json.dumps(summary, indent=1))
        if bad or len(results) != n:
            print(farm.logs(), file=sys.stderr)
            sys.exit(1)
    finally:
        farm.close()


if __name__ == "__main__":
    main()
