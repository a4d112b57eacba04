"""The worker's own time per action through a real BuildGrid farm (tests/buildgrid_farm.py):
N tiny actions (/bin/true, and a 10-file input root), fenced and unfenced; each worker writes,
per action, lease received -> result sent minus the command's run time (--stats-file).
Usage: python3 bench/worker_overhead.py [N]   (a sketch of `spawnkit bench worker`)"""

import json
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
import buildgrid_farm  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def run(farm, fence, files):
    stats = [farm.tmp / f"stats-{fence}-{files}-{i}.json" for i in range(2)]
    workers = [farm.start_worker(f"{fence}-{files}-{i}", "--fence", fence, "--stats-file", str(stats[i]))
               for i in range(2)]
    spec = {"args": ["/bin/true"]}
    if files:
        spec["files"] = {f"in/{i}.txt": f"file {i}\n" for i in range(files)}
    t = time.monotonic()
    res = farm.execute([spec] * N, timeout=600)
    wall = time.monotonic() - t
    bad = [r for r in res if r.get("code") != 0 or r.get("exit_code") != 0]
    assert not bad, bad[:3]
    for w in workers:
        w.terminate()
        w.wait()
    us = [x for s in stats for x in json.loads(s.read_text())["overhead_us"]]
    return wall, us


def main():
    farm = buildgrid_farm.Farm()
    try:
        print(f"{N} actions, 2 workers x concurrency 2, BuildGrid 0.4.4 + PostgreSQL on this machine")
        print(f"{'fence':<12}{'input files':>12}{'actions/s':>12}{'overhead p50 ms':>18}{'p90 ms':>10}")
        for fence in ("net,tmp,pid", "none"):
            for files in (0, 10):
                wall, us = run(farm, fence, files)
                us.sort()
                p50 = statistics.median(us) / 1000
                p90 = us[int(len(us) * 0.9)] / 1000
                print(f"{fence:<12}{files:>12}{N / wall:>12.1f}{p50:>18.2f}{p90:>10.2f}", flush=True)
    finally:
        farm.close()


if __name__ == "__main__":
    main()
