"""The farm rows of `spawnkit bench worker` (embedded in the spawnkit binary, which runs it with
the project's .venv Python): N tiny actions through a real BuildGrid farm (tests/buildgrid_farm.py:
BuildGrid 0.4.4 + a throwaway PostgreSQL) with two `spawnkit worker`s (concurrency 2 each), for
each fence (`net,tmp,pid`, the default, and `none`) and each input root (none: /bin/true; ten
small files). Per row: actions per second (N submitted at once, the first Execute to the last
result) and the worker's own time per action, which each worker writes with --stats-file:
lease received -> result sent minus the command's own run time (median, p90), of the attempts
reported OK (one reported with another status, which BuildGrid runs again where the status is
INTERNAL or UNAVAILABLE, is counted apart: failed_attempts, with the workers' log lines on
their leases); and the medians
of the phases the worker stamps in ExecutedActionMetadata (input fetch, execution, output upload,
and all three: the action's span) and of queued -> worker start (the scheduler's part); and the workers' own CPU time (user +
system, from /proc, the commands not counted) per action. The workers also write, per action, the
part of the own time spent waiting on BuildGrid (server_wait_us: the wall time of its CAS and
ByteStream calls, and result whole -> the end of the UpdateBotSession call in flight then): each
row reports the median of own - server wait, the worker's own time excluding BuildGrid's waits.

The floor (top-level "floor"): the round trip of trivial RPCs to the same BuildGrid, timed from a
Python gRPC client N times after the rows (GetCapabilities, FindMissingBlobs with no digests,
BatchReadBlobs of one small blob; medians), and per row, the median number of server calls an
action made (its CAS calls + the UpdateBotSession that reports it) times the smallest of them: what
BuildGrid's round trips alone put under the worker's own time.

Usage: python worker_overhead.py N    prints one JSON object on stdout ({"skipped": why} when
BuildGrid or PostgreSQL cannot be had). Environment: SPAWNKIT_BIN (the spawnkit binary),
SPAWNKIT_BUILDGRID_VENV (where BuildGrid is or goes), SPAWNKIT_FARM_NO_INSTALL=1 (use them if
installed, never install).
Run by hand from the source tree: python3 bench/worker_overhead.py 200
"""

import json
import os
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
# Beside this file when the spawnkit binary writes them out; tests/ in the source tree.
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
import buildgrid_farm  # noqa: E402

ROWS = [  # (id, --fence, input files, actions in flight)
    ("fenced_true", "net,tmp,pid", 0, 32),
    ("fenced_10_files", "net,tmp,pid", 10, 32),
    ("unfenced_true", "none", 0, 32),
    ("unfenced_10_files", "none", 10, 32),
    # One action at a time: BuildGrid answers the worker with nothing else to schedule, so
    # the own time shows what the worker costs beside an unloaded server.
    ("fenced_true_one_at_a_time", "net,tmp,pid", 0, 1),
]
# The same farm with its CAS in a BuildGrid process of its own (tests/buildgrid_farm.py,
# split_cas), which the workers read with --remote-cas: as farms deploy a CAS apart from the
# scheduler. Started after the rows above, on its own PostgreSQL.
SPLIT_ROWS = [
    ("split_cas_fenced_true", "net,tmp,pid", 0, 32),
    ("split_cas_fenced_true_one_at_a_time", "net,tmp,pid", 0, 1),
]
SERIAL_MAX = 40  # actions of a one-at-a-time row, at most


def say(*a):
    print("worker_overhead:", *a, file=sys.stderr, flush=True)


def pct(sorted_values, q):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def cpu_s(pid):
    """The CPU time (user + system, all threads, not the children) of a process so far."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase_ms(results, start, end):
    v = [(r["meta"][end] - r["meta"][start]) * 1e3 for r in results
         if start in r.get("meta", {}) and end in r.get("meta", {})]
    return statistics.median(v) if v else None


FLOOR = r'''
import hashlib, json, sys, time
import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
remote, instance, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
channel = grpc.insecure_channel(remote)
cas = re_grpc.ContentAddressableStorageStub(channel)
caps = re_grpc.CapabilitiesStub(channel)
data = b"spawnkit floor blob\n"
d = re.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))
cas.BatchUpdateBlobs(re.BatchUpdateBlobsRequest(
    instance_name=instance, requests=[re.BatchUpdateBlobsRequest.Request(digest=d, data=data)]))
calls = {
    "get_capabilities": lambda: caps.GetCapabilities(re.GetCapabilitiesRequest(instance_name=instance)),
    "find_missing_blobs_empty": lambda: cas.FindMissingBlobs(re.FindMissingBlobsRequest(instance_name=instance)),
    "batch_read_blobs_1": lambda: cas.BatchReadBlobs(re.BatchReadBlobsRequest(instance_name=instance, digests=[d])),
}
out = {k: [] for k in calls}
for f in calls.values():  # warm the channel and the server's paths
    f()
for _ in range(n):  # interleaved, so that each sees the same moments of the server
    for k, f in calls.items():
        t = time.perf_counter()
        f()
        out[k].append((time.perf_counter() - t) * 1e3)
print(json.dumps(out))
'''


PROBE = r'''
import hashlib, json, sys, threading, time
import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
remote, instance, gap = sys.argv[1], sys.argv[2], float(sys.argv[3]) / 1e3
cas = re_grpc.ContentAddressableStorageStub(grpc.insecure_channel(remote))
data = b"spawnkit probe blob\n"
d = re.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))
cas.BatchUpdateBlobs(re.BatchUpdateBlobsRequest(
    instance_name=instance, requests=[re.BatchUpdateBlobsRequest.Request(digest=d, data=data)]))
req = re.BatchReadBlobsRequest(instance_name=instance, digests=[d])
cas.BatchReadBlobs(req)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("ready", flush=True)
out = []
while True:  # the first read at once: the row starts as soon as "ready" is read
    t = time.perf_counter()
    cas.BatchReadBlobs(req)
    out.append((time.perf_counter() - t) * 1e3)
    if stop.wait(gap):
        break
print(json.dumps(out), flush=True)
'''
PROBE_GAP_MS = 20


class Probe:
    """BatchReadBlobs of one small blob every PROBE_GAP_MS from a client beside the workers
    (Python gRPC, as the floor's), while a row loads the farm: how long the CAS the workers
    read from takes to answer a trivial read under that same load."""

    def __init__(self, farm):
        import subprocess
        self.p = subprocess.Popen([farm.python, "-c", PROBE, farm.cas_address, farm.instance,
                                   str(PROBE_GAP_MS)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.p.stdout.readline()  # "ready": connected, its blob stored

    def stop(self):
        """The probe's round trips, ms (None if it failed)."""
        try:
            out, _ = self.p.communicate(input="", timeout=60)
            return json.loads(out.strip().splitlines()[-1])
        except Exception:
            self.p.kill()
            self.p.wait()
            return None


def floor(farm, n):
    """Medians (ms) of trivial RPCs to the farm's BuildGrid, N each, from a Python client."""
    import subprocess
    r = subprocess.run([farm.python, "-c", FLOOR, farm.cas_address, farm.instance, str(n)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return {"skipped": f"floor client failed: {r.stderr[-1500:]}"}
    got = json.loads(r.stdout)
    out = {"calls": n, "client": "python grpcio (sync), one channel",
           "rtt_ms_median": {k: statistics.median(v) for k, v in got.items()},
           "rtt_ms_min": {k: min(v) for k, v in got.items()}}
    out["rtt_ms"] = min(out["rtt_ms_median"].values())
    return out


def run(farm, n, row_id, fence, files, in_flight):
    stats = [farm.tmp / f"stats-{row_id}-{i}.json" for i in range(2)]
    workers = [farm.start_worker(f"{row_id}-{i}", "--fence", fence, "--stats-file", str(stats[i]))
               for i in range(2)]
    try:
        specs = []
        for i in range(n):
            # Each action its own digest (an environment variable), so that no two are merged
            # into one job by the scheduler.
            spec = {"args": ["/bin/true"], "env": {"SPAWNKIT_BENCH_ACTION": f"{row_id}-{i}"}}
            if files:
                spec["files"] = {f"in/{k}.txt": f"file {k}\n" for k in range(files)}
            specs.append(spec)
        # Under load only: one action at a time, the probe's calls would be the only other load.
        probe = Probe(farm) if in_flight > 1 else None
        cpu0 = sum(cpu_s(w.pid) for w in workers)
        t = time.monotonic()
        try:
            res = farm.execute(specs, timeout=600, in_flight=in_flight)
            wall = time.monotonic() - t
            cpu = sum(cpu_s(w.pid) for w in workers) - cpu0
        finally:
            probed = probe.stop() if probe else None
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(timeout=60)
            except Exception:
                w.kill()
                w.wait()
    bad = [r for r in res if r.get("code") != 0 or r.get("exit_code") != 0]
    if bad:
        raise RuntimeError(f"{len(bad)} of {n} actions failed, e.g. {bad[0]}\n{farm.logs()}")
    us, excl, wait, cas_wait, report_wait, calls, start, handoff = [], [], [], [], [], [], [], []
    failed = 0
    for s in stats:
        st = json.loads(s.read_text())
        failed += st.get("failed", 0)
        us += st["overhead_us"]
        wait += st.get("server_wait_us", [])
        excl += [o - w for o, w in zip(st["overhead_us"], st.get("server_wait_us", []))]
        cas_wait += st.get("cas_wait_us", [])
        report_wait += st.get("report_wait_us", [])
        calls += st.get("cas_calls", [])
        start += st.get("start_us", [])
        handoff += st.get("handoff_us", [])
    us.sort()

    def med_ms(v):
        return statistics.median(v) / 1e3 if v else None

    # Attempts reported with a status other than OK (BuildGrid runs INTERNAL and UNAVAILABLE
    # ones again): not in the own times. When they, or the own times, do not add up to one
    # per action, the workers' own words on their leases go with the row.
    worker_log = []
    if failed or len(us) != n:
        for w in workers:
            lines = pathlib.Path(w.log).read_text(errors="replace").splitlines()
            worker_log += [f"{w.log.name}: {x}" for x in lines if "lease" in x or "Session" in x][-20:]
    per_worker = {}
    for r in res:
        per_worker[r.get("worker", "?")] = per_worker.get(r.get("worker", "?"), 0) + 1
    return {
        "id": row_id, "fence": fence, "input_files": files, "actions": n, "in_flight": in_flight,
        "wall_s": wall, "actions_per_s": n / wall,
        # The workers' own CPU (user + system, not the commands') while the N actions ran.
        "worker_cpu_ms_per_action": cpu * 1e3 / n,
        "own_us": {"median": statistics.median(us) if us else None, "p90": pct(us, 0.9),
                   "min": us[0] if us else None, "max": us[-1] if us else None, "count": len(us)},
        "failed_attempts": failed,
        "worker_log": worker_log,
        # The own time minus the waits on BuildGrid (per action, then the median), and the waits.
        "own_excl_server_ms_median": med_ms(excl),
        "own_excl_server_ms_p90": pct(sorted(excl), 0.9) / 1e3 if excl else None,
        "server_wait_ms_median": med_ms(wait),
        "cas_wait_ms_median": med_ms(cas_wait),
        "report_wait_ms_median": med_ms(report_wait),
        "cas_calls_median": statistics.median(calls) if calls else None,
        # The CAS's answer to a trivial read under this row's load (the Probe), median and count.
        "cas_probe_ms_median": statistics.median(probed) if probed else None,
        "cas_probe_calls": len(probed) if probed else 0,
        # Parts of the own time excluding the waits: lease received -> the action's task
        # running, and result whole -> report sent (the rest is inside the action's task).
        "start_ms_median": med_ms(start),
        "handoff_ms_median": med_ms(handoff),
        "phases_ms": {
            "queued_to_worker_start": phase_ms(res, "queued_timestamp", "worker_start_timestamp"),
            "input_fetch": phase_ms(res, "input_fetch_start_timestamp", "input_fetch_completed_timestamp"),
            "execution": phase_ms(res, "execution_start_timestamp", "execution_completed_timestamp"),
            "output_upload": phase_ms(res, "output_upload_start_timestamp",
                                      "output_upload_completed_timestamp"),
            # The worker on the action itself: fetch + run + upload (not the Bots round trips).
            "action_span": phase_ms(res, "input_fetch_start_timestamp", "output_upload_completed_timestamp"),
            "worker_start_to_completed": phase_ms(res, "worker_start_timestamp", "worker_completed_timestamp"),
        },
        "actions_per_worker": sorted(per_worker.values(), reverse=True),
    }


def rows_on(farm, rows, n, out, floor_key):
    """Run `rows` on `farm` into out["rows"], then the idle floor into out[floor_key]."""
    for row_id, fence, files, in_flight in rows:
        k = n if in_flight > 1 else min(n, SERIAL_MAX)
        say(f"{row_id}: {k} actions, at most {in_flight} in flight, --fence {fence}")
        try:
            row = run(farm, k, row_id, fence, files, in_flight)
        except Exception as e:  # the row is skipped with its reason, the others still run
            row = {"id": row_id, "fence": fence, "input_files": files,
                   "skipped": f"{type(e).__name__}: {str(e)[-1500:]}"}
        row["split_cas"] = farm.split_cas
        out["rows"].append(row)
    say(f"floor: {n} round trips of trivial RPCs to the same BuildGrid")
    out[floor_key] = floor(farm, n)
    rtt = out[floor_key].get("rtt_ms")
    for r in out["rows"]:
        if r["split_cas"] == farm.split_cas and rtt is not None and r.get("cas_calls_median") is not None:
            # Its CAS calls + the UpdateBotSession that reports it, at one trivial round trip each.
            r["floor_ms"] = (r["cas_calls_median"] + 1) * rtt


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    out = {"actions": n, "workers": 2, "concurrency": 2, "buildgrid": buildgrid_farm.BUILDGRID,
           "rows": []}
    t0 = time.monotonic()
    for split, rows, floor_key in ((False, ROWS, "floor"), (True, SPLIT_ROWS, "split_cas_floor")):
        t = time.monotonic()
        try:
            farm = buildgrid_farm.Farm(split_cas=split)
        except Exception as e:
            unavailable = isinstance(e, buildgrid_farm.Unavailable)
            if not split:
                if not unavailable:
                    raise
                out["skipped"] = f"BuildGrid/PostgreSQL unavailable: {e}"
                print(json.dumps(out))
                return
            # The second farm's failure skips its rows only: the first farm's stay.
            why = (f"BuildGrid/PostgreSQL unavailable: {e}" if unavailable else
                   f"the farm with its CAS apart did not start: {type(e).__name__}: {str(e)[-1500:]}")
            for row_id, fence, files, _ in rows:
                out["rows"].append({"id": row_id, "fence": fence, "input_files": files,
                                    "split_cas": split, "skipped": why})
            out[floor_key] = {"skipped": why}
            continue
        out["split_cas_farm_start_s" if split else "farm_start_s"] = time.monotonic() - t
        out["postgresql"] = farm.pg.bindir.parent.name
        try:
            rows_on(farm, rows, n, out, floor_key)
        finally:
            farm.close()
    out["seconds"] = time.monotonic() - t0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
