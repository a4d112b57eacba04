"""`spawnkit worker` in a real farm: BuildGrid 0.4.4 (from PyPI) on a throwaway PostgreSQL
(Debian's package), two spawnkit workers, actions submitted with BuildGrid's own client
(`bgd execute command`) and with a small REAPI client (reapi_client.py).

Skips, loudly, only where BuildGrid or PostgreSQL cannot be installed (see buildgrid_farm.py).
"""

import json
import os
import pathlib
import signal
import sys
import threading
import time

import pytest

import buildgrid_farm

MIB = 1 << 20


@pytest.fixture(scope="module")
def farm():
    try:
        f = buildgrid_farm.Farm()
    except buildgrid_farm.Unavailable as e:
        msg = f"SKIPPING the BuildGrid farm tests of `spawnkit worker`: {e}"
        print(f"\n{'!' * 20}\n{msg}\n{'!' * 20}", file=sys.stderr)
        pytest.skip(msg)
    try:
        f.start_worker("a")
        f.start_worker("b")
        yield f
    finally:
        f.close()


def procs_with(marker):
    """Pids whose command line contains `marker`."""
    found = []
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def assert_clean(work):
    """Nothing of any action is left in a worker's action directories: each workspace
    (actions/wN, reused from action to action) holds an empty input root and an empty stdout
    and stderr, and nothing else."""
    for ws in (work / "actions").iterdir():
        assert {p.name for p in ws.iterdir()} <= {"root", "io"}, list(ws.iterdir())
        if (ws / "root").exists():
            assert list((ws / "root").iterdir()) == [], ws
        if (ws / "io").exists():
            io = {p.name: p.stat().st_size for p in (ws / "io").iterdir()}
            assert set(io) <= {"stdout", "stderr"} and set(io.values()) <= {0}, (ws, io)


def slot_bots(farm, *workers):
    """{bot id: [session names]} of the given workers' slots (test-NAME/SLOT) in BuildGrid."""
    out = {}
    for bot_id, name, capacity in farm.bots():
        if bot_id.split("/")[0] in [f"test-{w}" for w in workers]:
            assert capacity == 1, (bot_id, capacity)
            out.setdefault(bot_id, []).append(name)
    return out


def by_name(specs, results):
    return {s["name"]: r for s, r in zip(specs, results)}


def test_actions(farm):
    port = farm.port
    specs = [
        {"name": "echo", "args": ["sh", "-c", "echo hello; echo oops >&2; exit 3"]},
        {"name": "true", "args": ["true"]},
        {"name": "outputs", "args": ["sh", "-c",
                                     "mkdir -p out/d/e && echo one > out/d/e/f.txt && echo two > out/g && "
                                     "ln -s g out/link && printf '#!/bin/sh\\n' > bin/tool && chmod +x bin/tool && "
                                     "ln -s bin/tool tool-link && echo plain > plain.txt"],
         "output_files": ["bin/tool", "plain.txt", "tool-link", "never-made"], "output_dirs": ["out"]},
        {"name": "output_paths", "args": ["sh", "-c", "mkdir -p a/b && echo x > a/b/c && echo y > f"],
         "output_paths": ["a", "f"]},
        {"name": "big", "args": ["sh", "-c", "head -c 67108864 /dev/urandom > big.bin"],
         "output_files": ["big.bin"]},
        {"name": "env", "args": ["sh", "-c", "echo \"FOO=$FOO\"; env"],
         "env": {"FOO": "bar baz", "PATH": "/usr/bin:/bin", "EMPTY": ""}},
        {"name": "cwd", "args": ["sh", "-c", "pwd; cat in.txt; ./run.sh"], "cwd": "sub/dir",
         "files": {"sub/dir/in.txt": "input data\n",
                   "sub/dir/run.sh": {"text": "#!/bin/sh\necho executable input\n", "exec": True}}},
        {"name": "timeout", "timeout": 2,
         "args": ["sh", "-c", "sleep 3011 & echo started; setsid sleep 3012 & sleep 3013"]},
        {"name": "net_fenced", "args": ["bash", "-c",
                                        f"echo > /dev/tcp/127.0.0.1/{port} && echo connected || echo refused"]},
        {"name": "net_on", "platform": {"network": "on"},
         "args": ["bash", "-c", f"echo > /dev/tcp/127.0.0.1/{port} && echo connected || echo refused"]},
        {"name": "missing", "args": ["cat", "missing.bin"], "missing_input": True},
        {"name": "notfound", "args": ["no-such-program-spawnkit"]},
        {"name": "tmp_pid", "args": ["sh", "-c", "ls -A /tmp | wc -l; echo pid=$$; touch /tmp/mine"]},
    ]
    results = by_name(specs, farm.execute(specs))
    logs = farm.logs()
    for name, r in results.items():
        assert "error" not in r, f"{name}: {r['error']}\n{logs}"

    r = results["echo"]
    assert (r["code"], r["exit_code"], r["stdout"], r["stderr"]) == (0, 3, "hello\n", "oops\n"), r
    assert r["worker"] in ("test-a", "test-b")
    m = r["meta"]
    order = ["queued_timestamp", "worker_start_timestamp", "input_fetch_start_timestamp",
             "input_fetch_completed_timestamp", "execution_start_timestamp",
             "execution_completed_timestamp", "output_upload_start_timestamp",
             "output_upload_completed_timestamp"]
    assert all(k in m for k in order), m
    assert [m[k] for k in order] == sorted(m[k] for k in order), m

    assert (results["true"]["code"], results["true"]["exit_code"], results["true"]["stdout"]) == (0, 0, "")

    r = results["outputs"]
    assert r["exit_code"] == 0, r
    assert r["files"]["bin/tool"]["exec"] is True
    assert r["files"]["bin/tool"]["text"] == "#!/bin/sh\n"
    assert r["files"]["plain.txt"] == {**r["files"]["plain.txt"], "text": "plain\n", "exec": False}
    assert "never-made" not in r["files"]
    assert r["symlinks"]["tool-link"] == "bin/tool"
    tree = r["dirs"]["out"]
    assert tree["d/e/f.txt"]["text"] == "one\n"
    assert tree["g"]["text"] == "two\n"
    assert tree["link"] == {"symlink": "g"}

    r = results["output_paths"]
    assert r["dirs"]["a"]["b/c"]["text"] == "x\n"
    assert r["files"]["f"]["text"] == "y\n"

    r = results["big"]
    assert r["exit_code"] == 0, r
    assert r["files"]["big.bin"]["size"] == 64 * MIB  # and its bytes matched its digest

    r = results["env"]
    lines = r["stdout"].splitlines()
    assert lines[0] == "FOO=bar baz"
    env = dict(line.split("=", 1) for line in lines[1:])
    assert env["PATH"] == "/usr/bin:/bin" and env["EMPTY"] == ""
    assert "HOME" not in env and "CARGO_HOME" not in env, env  # nothing of the worker's leaks

    r = results["cwd"]
    assert r["exit_code"] == 0, r
    out = r["stdout"].splitlines()
    assert out[0].endswith("/root/sub/dir") and out[1:] == ["input data", "executable input"], r

    r = results["timeout"]
    assert r["code"] == 4, r  # DEADLINE_EXCEEDED
    assert r["stdout"] == "started\n"
    assert r["exit_code"] != 0
    # The whole tree died with it, the setsid one too (it was in the action's pid namespace).
    assert procs_with("sleep 301") == []

    assert results["net_fenced"]["stdout"] == "refused\n", results["net_fenced"]
    assert results["net_on"]["stdout"] == "connected\n", results["net_on"]

    r = results["missing"]
    assert r["code"] == 9, r  # FAILED_PRECONDITION
    assert r["missing_digest"] in r["message"]
    assert ["MISSING", f"blobs/{r['missing_digest']}"] in r["violations"]

    r = results["notfound"]
    assert r["code"] == 0 and r["exit_code"] == 127, r
    assert "no-such-program-spawnkit" in r["stderr"]

    r = results["tmp_pid"]
    assert r["stdout"] == "0\npid=1\n", r

    # Both workers took part, and each cleaned its work directory after every action.
    assert {r["worker"] for r in results.values() if r.get("worker")} == {"test-a", "test-b"}
    for w in farm.workers:
        assert_clean(w.work)


def test_bgd_execute_command(farm, tmp_path):
    """BuildGrid's own client: it uploads the input root, waits, and downloads the outputs."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "in.txt").write_text("from the input root\n")
    r = farm.bgd_execute("--output-file", "out.txt", str(root), "--", "sh", "-c",
                         "tr a-z A-Z < in.txt > out.txt", cwd=tmp_path)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{farm.logs()}"
    assert (tmp_path / "testing" / "out.txt").read_text() == "FROM THE INPUT ROOT\n", r.stdout
    # bgd prints the operation; its metadata names the worker that ran it.
    assert "test-a" in r.stdout or "test-b" in r.stdout, r.stdout


def test_each_slot_is_a_bot(farm):
    """Each --concurrency slot is a bot session of its own (capacity 1, bot id ID/SLOT) in
    BuildGrid, and the same ones, once each, after the server restarted."""
    expected = {"test-a/0", "test-a/1", "test-b/0", "test-b/1"}
    before = slot_bots(farm, "a", "b")
    assert set(before) == expected and all(len(v) == 1 for v in before.values()), before
    farm.stop_server()
    time.sleep(1)
    farm.start_server()
    # Every slot takes work again: four actions held open at once need all four.
    fifo = farm.tmp / "slots-go"
    os.mkfifo(fifo)
    specs = [{"name": f"s{i}", "args": ["sh", "-c", f"cat {fifo} > /dev/null; echo {i}"]} for i in range(4)]
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", farm.execute(specs)))
    t.start()
    deadline = time.monotonic() + 120
    while len(procs_with(f"cat\0{fifo}")) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(procs_with(f"cat\0{fifo}")) >= 4, farm.logs()
    with open(fifo, "w"):
        pass
    t.join(timeout=120)
    assert [r.get("stdout") for r in out["r"]] == [f"{i}\n" for i in range(4)], f"{out}\n{farm.logs()}"
    after = slot_bots(farm, "a", "b")
    assert set(after) == expected and all(len(v) == 1 for v in after.values()), after


def test_results_close_together(farm):
    """Two actions of one worker that finish at the same moment are both reported, and
    neither result waits for a Bots call in flight (report_wait is 0 for both: each slot's
    session reports its own)."""
    stats = farm.tmp / "stats-e.json"
    e = farm.start_worker("e", "--stats-file", str(stats), platform="OSFamily=pair")
    fifo = farm.tmp / "pair-go"
    os.mkfifo(fifo)
    specs = [{"name": f"p{i}", "platform": {"OSFamily": "pair"},
              "args": ["sh", "-c", f"cat {fifo} > /dev/null; echo pair {i}"]} for i in range(2)]
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", farm.execute(specs)))
    t.start()
    deadline = time.monotonic() + 60
    while len(procs_with(f"cat\0{fifo}")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(procs_with(f"cat\0{fifo}")) >= 2, farm.logs()
    with open(fifo, "w"):  # both readers see the end of the FIFO at once
        pass
    t.join(timeout=60)
    assert "r" in out, farm.logs()
    for i, r in enumerate(out["r"]):
        assert (r.get("code"), r.get("stdout"), r.get("worker")) == (0, f"pair {i}\n", "test-e"), r
    e.send_signal(signal.SIGTERM)
    assert e.wait(timeout=30) == 0, buildgrid_farm.tail(e.log)
    st = json.loads(stats.read_text())
    assert st["completed"] == 2 and st["report_wait_us"] == [0, 0], st


def test_failed_attempts_are_counted_apart(farm):
    """--stats-file: an attempt reported with a status other than OK (here a missing input,
    FAILED_PRECONDITION) is counted as failed, and its time is not among the own times of the
    actions that completed (BuildGrid runs an INTERNAL or UNAVAILABLE one again, and the
    bench's one own time per action must not count both)."""
    stats = farm.tmp / "stats-g.json"
    g = farm.start_worker("g", "--stats-file", str(stats), concurrency=1, platform="OSFamily=failing")
    specs = [{"name": "ok", "platform": {"OSFamily": "failing"}, "args": ["echo", "fine"]},
             {"name": "missing", "platform": {"OSFamily": "failing"}, "args": ["cat", "missing.bin"],
              "missing_input": True}]
    results = by_name(specs, farm.execute(specs))
    assert (results["ok"]["code"], results["ok"]["stdout"]) == (0, "fine\n"), results["ok"]
    assert results["missing"]["code"] == 9, results["missing"]
    g.send_signal(signal.SIGTERM)
    assert g.wait(timeout=30) == 0, buildgrid_farm.tail(g.log)
    st = json.loads(stats.read_text())
    assert (st["completed"], st["failed"], len(st["overhead_us"])) == (1, 1, 1), st
    assert "1 actions completed, 1 failed" in g.log.read_text(), buildgrid_farm.tail(g.log)


def test_no_pid_fence_no_reuse(farm):
    """Without the pid fence, a process that left the action's process group outlives it: the
    action's directory is removed, not reused, so what that process writes later never shows
    up in the next action's input root."""
    f = farm.start_worker("f", "--fence", "net,tmp", concurrency=1, platform="OSFamily=nopid")
    first = [{"platform": {"OSFamily": "nopid"}, "args": [
        "sh", "-c",
        # (the pause: the group is killed when sh exits; setsid must have run by then)
        "setsid sh -c 'sleep 1; echo leak > leaked.txt' >/dev/null 2>&1 & sleep 0.5; echo started"]}]
    second = [{"platform": {"OSFamily": "nopid"}, "args": ["sh", "-c", "sleep 1.5; ls -A"]}]
    r1 = farm.execute(first)[0]
    assert (r1.get("code"), r1.get("stdout")) == (0, "started\n"), r1
    r2 = farm.execute(second)[0]
    assert (r2.get("code"), r2.get("exit_code")) == (0, 0), r2
    assert "leaked.txt" not in r2["stdout"], r2
    f.send_signal(signal.SIGTERM)
    assert f.wait(timeout=30) == 0, buildgrid_farm.tail(f.log)


def test_server_restart(farm):
    """Actions running while the server restarts finish once, with whole results; the workers
    reconnect and take new work."""
    specs = [{"name": f"slow{i}", "args": ["sh", "-c", f"sleep 2; echo {i} > o.txt; echo done {i}"],
              "output_files": ["o.txt"]} for i in range(4)]
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", farm.execute(specs)))
    t.start()
    time.sleep(1.2)
    farm.stop_server()
    time.sleep(2.5)
    farm.start_server()
    t.join(timeout=200)
    assert "r" in out, farm.logs()
    for i, r in enumerate(out["r"]):
        assert "error" not in r, f"{r}\n{farm.logs()}"
        assert (r["code"], r["exit_code"], r["stdout"]) == (0, 0, f"done {i}\n"), r
        assert r["files"]["o.txt"]["text"] == f"{i}\n"
    again = farm.execute([{"args": ["echo", "after restart"]}])[0]
    assert again["stdout"] == "after restart\n", f"{again}\n{farm.logs()}"


def test_sigterm_finishes_or_returns(farm):
    """SIGTERM: an idle worker leaves at once; a running action finishes and is reported
    before its worker exits; past the drain timeout, the lease goes back to the farm and
    another worker runs it. (Last in this file: it stops the module's workers.)"""
    for w in farm.workers:
        w.send_signal(signal.SIGTERM)
    for w in farm.workers:
        assert w.wait(timeout=30) == 0, buildgrid_farm.tail(w.log)
    d = farm.start_worker("d", "--drain-timeout", "0.3", concurrency=1)
    out = {}
    specs = [{"args": ["sh", "-c", "sleep 2.5; echo finished"]}]
    t = threading.Thread(target=lambda: out.setdefault("r", farm.execute(specs)))
    t.start()
    deadline = time.monotonic() + 30
    while not procs_with("sleep 2.5") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs_with("sleep 2.5"), farm.logs()
    d.send_signal(signal.SIGTERM)
    assert d.wait(timeout=30) == 0, buildgrid_farm.tail(d.log)
    assert "returning lease" in d.log.read_text()
    assert procs_with("sleep 2.5") == []  # the returned action's tree is gone
    c = farm.start_worker("c", "--drain-timeout", "30", concurrency=1)
    deadline = time.monotonic() + 60
    while not procs_with("sleep 2.5") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs_with("sleep 2.5"), farm.logs()
    c.send_signal(signal.SIGTERM)
    assert c.wait(timeout=60) == 0, buildgrid_farm.tail(c.log)
    t.join(timeout=100)
    assert "r" in out, farm.logs()
    r = out["r"][0]
    assert (r.get("code"), r.get("stdout"), r.get("worker")) == (0, "finished\n", "test-c"), \
        f"{r}\n{farm.logs()}"
    actions = c.work / "actions"
    assert not actions.exists() or list(actions.iterdir()) == []


def test_remote_cas():
    """`--remote-cas`: a farm whose CAS and ByteStream live in a BuildGrid process of their
    own (as farms deploy a CAS apart from the scheduler) and whose scheduler's process serves
    neither, so a worker that read or wrote blobs anywhere but the CAS it was given would
    fail. Inputs come from it, outputs (a file, a directory as a Tree, stdout) go to it, and a
    missing input is still FAILED_PRECONDITION naming the digest."""
    try:
        f = buildgrid_farm.Farm(split_cas=True)
    except buildgrid_farm.Unavailable as e:
        msg = f"SKIPPING the split-CAS farm test of `spawnkit worker`: {e}"
        print(f"\n{'!' * 20}\n{msg}\n{'!' * 20}", file=sys.stderr)
        pytest.skip(msg)
    try:
        w = f.start_worker("cas-apart", concurrency=1)
        assert "--remote-cas" in w.args, w.args
        specs = [
            {"name": "io", "args": ["sh", "-c", "tr a-z A-Z < in.txt | tee out.txt; mkdir d; echo x > d/y"],
             "files": {"in.txt": "from the cas apart\n"}, "output_files": ["out.txt"],
             "output_dirs": ["d"]},
            {"name": "big", "args": ["sh", "-c", "head -c 3000000 /dev/urandom > big.bin"],
             "output_files": ["big.bin"]},
            {"name": "missing", "args": ["cat", "missing.bin"], "missing_input": True},
        ]
        results = by_name(specs, f.execute(specs))
        logs = f.logs()
        r = results["io"]
        assert "error" not in r and (r["code"], r["exit_code"]) == (0, 0), f"{r}\n{logs}"
        assert r["worker"] == "test-cas-apart", r
        assert r["stdout"] == "FROM THE CAS APART\n", r
        assert r["files"]["out.txt"]["text"] == "FROM THE CAS APART\n", r
        assert r["dirs"]["d"]["y"]["text"] == "x\n", r
        r = results["big"]  # over one gRPC message's batch: ByteStream, on the CAS apart
        assert "error" not in r and r["code"] == 0, f"{r}\n{logs}"
        assert r["files"]["big.bin"]["size"] == 3000000, r
        r = results["missing"]
        assert r["code"] == 9 and r["missing_digest"] in r["message"], f"{r}\n{logs}"
        assert_clean(w.work)
    finally:
        f.close()
