"""The asyncio rows of `spawnkit bench async`, run by the spawnkit binary.

Starts TOTAL processes with at most LIMIT running at once and waits for all of them, from one
asyncio event loop, with:

* ``asyncio`` -- ``asyncio.create_subprocess_exec`` with CPython 3.11's default child watcher
  (``ThreadedChildWatcher``: a thread per child);
* ``asyncio_pidfd`` -- the same with ``PidfdChildWatcher`` (opt-in in 3.11);
* ``asyncio_spawnkit`` -- ``spawnkit.asyncio.create_subprocess_exec`` (the engine's spawn, the
  exit learnt with ``loop.add_reader(pidfd)``);
* ``asyncio_spawnkit_server`` -- the same with a private spawn server set process-wide
  (``spawnkit.subprocess.use_server(spawnkit.Server())``, forked when the script starts): the
  requests go out without waiting and their answers are read by ``loop.add_reader`` on the
  connection, so the loop's thread never clones.

For each: the wall time, processes per second, the event loop's longest stall (the largest gap
between two ticks of a 1 ms timer, minus the 1 ms, while the spawning runs) and the most
threads the process had at once (sampled by that same timer). The rows take turns, ROUNDS
times; each row keeps its fastest round's wall time and the smallest of its rounds' longest
stalls (the shared machine's noise only ever slows a round or lengthens a stall).

Usage: python_async.py PROGRAM TOTAL LIMIT ROUNDS     prints one JSON object on stdout.
"""

import asyncio
import json
import os
import sys
import threading
import time


def threads_now():
    return len(os.listdir("/proc/self/task"))


async def spawn_all(create, prog, total, limit):
    sem = asyncio.Semaphore(limit)

    async def one():
        async with sem:
            p = await create(prog, stdin=asyncio.subprocess.DEVNULL,
                             stdout=asyncio.subprocess.DEVNULL)
            rc = await p.wait()
            if rc != 0:
                raise SystemExit(f"{prog} exited with {rc}")

    await asyncio.gather(*(one() for _ in range(total)))


async def measured(create, prog, total, limit):
    loop = asyncio.get_running_loop()
    stall = 0.0
    most_threads = threads_now()
    done = False

    async def ticker():
        nonlocal stall, most_threads
        last = loop.time()
        while not done:
            await asyncio.sleep(0.001)
            now = loop.time()
            stall = max(stall, now - last - 0.001)
            last = now
            most_threads = max(most_threads, threads_now())

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.005)  # the ticker runs
    t0 = time.perf_counter()
    await spawn_all(create, prog, total, limit)
    wall = time.perf_counter() - t0
    done = True
    await tick
    return {"wall_s": wall, "per_s": total / wall, "stall_ms": max(stall, 0.0) * 1e3,
            "threads": most_threads}


def run_row(row, prog, total, limit, server=None):
    if row in ("asyncio_spawnkit", "asyncio_spawnkit_server"):
        import spawnkit.asyncio as ska
        import spawnkit.subprocess as sks

        async def main():
            return await measured(ska.create_subprocess_exec, prog, total, limit)

        sks.use_server(server if row == "asyncio_spawnkit_server" else None)
        try:
            return asyncio.run(main())
        finally:
            sks.use_server(None)
    watcher = asyncio.ThreadedChildWatcher() if row == "asyncio" else asyncio.PidfdChildWatcher()
    policy = asyncio.get_event_loop_policy()
    loop = policy.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        watcher.attach_loop(loop)
        policy.set_child_watcher(watcher)
        return loop.run_until_complete(
            measured(asyncio.create_subprocess_exec, prog, total, limit))
    finally:
        policy.set_child_watcher(None)
        watcher.attach_loop(None)
        watcher.close()
        asyncio.set_event_loop(None)
        loop.close()


def main():
    prog, total, limit, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rows = ["asyncio", "asyncio_pidfd"]
    skipped = {}
    server = None
    try:
        import spawnkit
        import spawnkit.asyncio  # noqa: F401
        rows.append("asyncio_spawnkit")
    except ImportError as e:
        for row in ("asyncio_spawnkit", "asyncio_spawnkit_server"):
            skipped[row] = f"spawnkit is not installed in {sys.executable}: {e}"
    else:
        try:
            # Forked now, while this process is small and has one thread.
            server = spawnkit.Server()
        except OSError as e:
            skipped["asyncio_spawnkit_server"] = f"no private spawn server: {e}"
        else:
            if server.exit_frames:
                skipped["asyncio_spawnkit_server"] = (
                    "this kernel cannot tell a non-parent a child's exit status "
                    "(PIDFD_INFO_EXIT, Linux 6.15): answers are not awaited")
            else:
                rows.append("asyncio_spawnkit_server")
    best = {}
    for r in range(rounds):
        order = rows if r % 2 == 0 else rows[::-1]
        for row in order:
            got = run_row(row, prog, total, limit, server)
            if row not in best or got["wall_s"] < best[row]["wall_s"]:
                keep_stall = min(got["stall_ms"], best.get(row, got)["stall_ms"])
                best[row] = dict(got, stall_ms=keep_stall)
            else:
                best[row]["stall_ms"] = min(best[row]["stall_ms"], got["stall_ms"])
    out = {"python": sys.version.split()[0], "executable": sys.executable, "total": total,
           "limit": limit, "rounds": rounds, "threads_at_start": threading.active_count(),
           "rows": best, "skipped": skipped}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
