"""spawnkit.ps(), spawnkit.memory(), spawnkit.shared_regions(): checked against /proc read
independently, against psutil, and with the probe's fixtures (a known process tree with odd
names; a known shared anonymous region whose writers have exited)."""

import json
import os
import pathlib
import subprocess
import textwrap
import threading
import time

import pytest

import spawnkit

from conftest import PY, is_root

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIB = 1 << 20
ODD = "a b) (c\nd"


def probe_path():
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    p = target / "debug" / "spawnkit-probe"
    assert p.is_file(), f"{p} is missing: build it first (cargo build --workspace --bins)"
    return str(p)


class Fixture:
    """A probe fixture: started, its `ready ...` line read, stopped by closing its stdin."""

    def __init__(self, *args):
        self.p = subprocess.Popen([probe_path(), *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().split()
        assert line and line[0] == "ready", f"fixture {args} said {line!r}"
        self.words = line[1:]

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)
        self.p.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def proc_stat(pid):
    """(comm, state, ppid, threads, start_ticks, rss_bytes) from /proc/PID/stat."""
    raw = pathlib.Path(f"/proc/{pid}/stat").read_bytes()
    comm = raw[raw.index(b"(") + 1:raw.rindex(b")")]
    f = raw[raw.rindex(b")") + 2:].split()
    return (os.fsdecode(comm), f[0].decode(), int(f[1]), int(f[17]), int(f[19]),
            int(f[21]) * os.sysconf("SC_PAGE_SIZE"))


def euid(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])
    raise AssertionError("no Uid line")


def children_of(pid):
    """The pids whose parent is `pid`, from /proc/PID/stat."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except OSError:
                pass
    return out


def backends():
    out = ["procfs"]
    if spawnkit.ps_backend("auto")[0] == "bpf":
        out.append("bpf")
    elif os.environ.get("SPAWNKIT_REQUIRE_BPF") == "1":
        pytest.fail(f"SPAWNKIT_REQUIRE_BPF=1 but ps() fell back: {spawnkit.ps_backend()[1]}")
    return out


@pytest.fixture(params=["procfs", "bpf"])
def backend(request):
    if request.param not in backends():
        pytest.skip(f"BPF backend unavailable here: {spawnkit.ps_backend()[1]}")
    return request.param


def test_own_process_matches_proc(backend):
    me = spawnkit.ps(pids=os.getpid(), uid=True, cmdline=True, backend=backend)
    assert len(me) == 1
    p = me[0]
    comm, _state, ppid, threads, start, _rss = proc_stat(os.getpid())
    assert (p.pid, p.ppid, p.comm, p.name, p.threads, p.start_ticks) == (
        os.getpid(), ppid, comm, comm, threads, start)
    assert p.state == "R"  # it is running: reading its own table
    assert p.uid == os.geteuid()
    assert p.rss > 0
    assert p.cmdline == pathlib.Path("/proc/self/cmdline").read_bytes().decode().split("\0")[:-1]
    boot = next(int(line.split()[1]) for line in pathlib.Path("/proc/stat").read_text()
                .splitlines() if line.startswith("btime"))
    assert p.start_time == pytest.approx(boot + start / os.sysconf("SC_CLK_TCK"))
    d = p.as_dict()
    assert set(d) == {"pid", "ppid", "comm", "state", "uid", "threads", "start_time", "rss",
                      "cmdline"}
    assert d["pid"] == os.getpid() and d["cmdline"] == p.cmdline


def test_costly_fields_only_when_asked():
    p = spawnkit.ps(pids=[os.getpid()], backend="procfs")[0]
    assert p.cmdline is None and p.uid is None
    p = spawnkit.ps(pids=[os.getpid()], backend="procfs", uid=True)[0]
    assert p.uid == os.geteuid() and p.cmdline is None


def test_tree_fixture_both_backends_agree_with_proc():
    with Fixture("tree", "2", "3", ODD) as f:
        pids = [int(w) for w in f.words]
        assert len(pids) == 13
        # A fixture process can be caught between states (R for a moment as it settles into
        # its sleep): the listings and /proc are read at slightly different times, so the
        # comparison is taken again (up to 20 times) until one reading agrees in full.
        for attempt in range(20):
            listings = {}
            for b in backends():
                got = spawnkit.ps(tree_of=pids[0], uid=True, backend=b)
                assert sorted(p.pid for p in got) == sorted(pids), b
                listings[b] = {p.pid: (p.ppid, p.comm, p.state, p.uid, p.threads, p.start_ticks,
                                       p.rss) for p in got}
            wants = {}
            for pid in pids:
                comm, state, ppid, threads, start, rss = proc_stat(pid)
                wants[pid] = (ppid, comm, state, euid(pid), threads, start, rss)
                assert comm == ODD[:15]
            if all(listing == wants for listing in listings.values()):
                break
            time.sleep(0.05)
        for pid in pids:
            for b, listing in listings.items():
                assert listing[pid] == wants[pid], (b, pid, attempt)
        # Selectors: direct children of the root; an explicit pid set.
        kids = spawnkit.ps(ppid=pids[0])
        assert sorted(p.pid for p in kids) == sorted(pids[1:4])
        assert [p.pid for p in spawnkit.ps(pids=[pids[5], pids[2]])] == sorted([pids[2], pids[5]])
        # Several selectors add up, as procps' and `spawnkit ps`'s do (issue 12). This test
        # used to assert the intersection (the bug the issue names: Python and the CLI
        # disagreed); it now asserts the union.
        grand = next(p for p in pids[1:] if proc_stat(p)[2] != pids[0])
        parent = proc_stat(grand)[2]
        either = spawnkit.ps(pids=[grand], ppid=pids[0])
        assert sorted(p.pid for p in either) == sorted(pids[1:4] + [grand])
        everything = spawnkit.ps(pids=pids[:5], ppid=pids[0], tree_of=pids[0])
        assert sorted(p.pid for p in everything) == sorted(pids)
        me = os.getpid()
        assert [p.pid for p in spawnkit.ps(pids=[me], tree_of=parent)] == sorted(
            [me, parent] + [q for q in pids if proc_stat(q)[2] == parent])
        siblings = sorted(q for q in pids if proc_stat(q)[2] == parent)
        assert len(siblings) == 3
        assert [p.pid for p in spawnkit.ps(ppid=parent, tree_of=grand)] == siblings
        # An empty selector selects nothing (not every process), and adds nothing.
        assert spawnkit.ps(pids=[]) == []
        assert sorted(p.pid for p in spawnkit.ps(pids=[], ppid=pids[0])) == sorted(pids[1:4])
        # A pid that does not exist adds nothing.
        assert [p.pid for p in spawnkit.ps(pids=[grand, 2**22 + 1])] == [grand]


def spawnkit_path():
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    p = target / "debug" / "spawnkit"
    assert p.is_file(), f"{p} is missing: build it first (cargo build --workspace --bins)"
    return str(p)


def test_cli_and_python_select_the_same_processes():
    # Issue 12: one library Selection behind both faces. With a sleeping child of this
    # process, `spawnkit ps -p ME --ppid ME` and ps(pids=[ME], ppid=ME) list ME and the child.
    me = os.getpid()
    child = subprocess.Popen(["sleep", "60"])
    try:
        for args, kwargs in [
            (["-p", str(me), "--ppid", str(me)], dict(pids=[me], ppid=me)),
            (["--tree-of", str(me), "-p", "1"], dict(tree_of=me, pids=1)),
            (["--ppid", "0", "-p", str(child.pid)], dict(ppid=0, pids=child.pid)),
        ]:
            for b in backends():
                cli = subprocess.Popen([spawnkit_path(), "ps", "--backend", b, "-o", "pid",
                                        "--json", *args], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
                out, err = cli.communicate(timeout=60)
                assert cli.returncode == 0, err
                # The command is itself a child of this process while it lists (procps' ps
                # shows itself too); Python's listing runs after it has gone.
                shown = [row["pid"] for row in json.loads(out) if row["pid"] != cli.pid]
                listed = [p.pid for p in spawnkit.ps(backend=b, **kwargs)]
                assert shown == listed, (args, b)
                if args[:2] == ["-p", str(me)]:
                    # The union: this process and every child it has (the sleep, and any
                    # long-lived helper an earlier test left, such as multiprocessing's
                    # resource tracker), as /proc tells it.
                    assert child.pid in listed and listed == sorted([me, *children_of(me)]), b
    finally:
        child.kill()
        child.wait()


def test_listing_agrees_with_psutil():
    psutil = pytest.importorskip("psutil")
    with Fixture("tree", "1", "4", ODD) as f:
        pids = [int(w) for w in f.words]
        ours = {p.pid: (p.ppid, p.comm) for p in spawnkit.ps(tree_of=pids[0])}
        theirs = {p.pid: (p.ppid(), p.name()) for p in map(psutil.Process, pids)}
        assert ours == theirs


def test_processes_vanishing_during_listing_are_no_error():
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            subprocess.run(["true"])

    t = threading.Thread(target=churn)
    t.start()
    try:
        for b in backends():
            for i in range(20):
                got = spawnkit.ps(backend=b, cmdline=i % 2 == 0, uid=True)
                assert any(p.pid == os.getpid() for p in got)
    finally:
        stop.set()
        t.join()


def test_dead_and_bad_pids():
    p = subprocess.Popen(["true"])
    p.wait()
    assert spawnkit.ps(pids=[p.pid]) == []
    assert spawnkit.memory(p.pid) == []
    with pytest.raises(ValueError, match="not a process id"):
        spawnkit.ps(pids=0)
    with pytest.raises(ValueError, match="not a process id"):
        spawnkit.ps(ppid=-1)
    # The children of 0: the processes without a parent (as `spawnkit ps --ppid 0`).
    orphans = {p.pid for p in spawnkit.ps(ppid=0)}
    assert 1 in orphans and all(p.ppid == 0 for p in spawnkit.ps(ppid=[0]))
    with pytest.raises(TypeError):
        spawnkit.ps(pids="1")
    with pytest.raises(ValueError, match="'nope' is not a backend"):
        spawnkit.ps(backend="nope")
    with pytest.raises(ValueError):
        spawnkit.memory(top=-1)


def test_bpf_backend_is_kept_or_refused_clearly():
    if "bpf" in backends():
        assert spawnkit.ps_backend("bpf") == ("bpf", None)
        assert len(spawnkit.ps(backend="bpf")) > 1
    else:
        with pytest.raises(OSError):
            spawnkit.ps(backend="bpf")


DROP_UNDER_HIDEPID = textwrap.dedent("""
    import ctypes, json, os, spawnkit
    libc = ctypes.CDLL(None, use_errno=True)

    def check(ret, what):
        if ret != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    def listing():
        return [[p.pid, p.uid] for p in spawnkit.ps(uid=True, cmdline=True)]

    out = {"me": os.getpid(), "before": listing(), "backend_before": spawnkit.ps_backend()}
    # A mount namespace of its own, every mount private (nothing propagates to the host's),
    # with a new procfs on /proc that hides other users' processes; then become nobody.
    CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x20000, 0x4000, 1 << 18
    MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None),
          "mount --make-rprivate /")
    check(libc.mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC),
                     b"hidepid=invisible"), "mount proc hidepid=invisible")
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    out["after"] = listing()
    out["backend_after"] = spawnkit.ps_backend()
    out["proc"] = sorted(int(n) for n in os.listdir("/proc") if n.isdigit())
    out["memory"] = [m.pid for m in spawnkit.memory()]
    print(json.dumps(out))
""")


@pytest.mark.skipif(not is_root(), reason="dropping to nobody needs root")
def test_ps_after_dropping_privileges_shows_what_proc_shows():
    # Issue 11, case 6: ps() as root loads the BPF iterator; after setuid(65534) under a /proc
    # mounted hidepid=invisible, the next ps() must list what /proc shows nobody (its own
    # processes), not every process with its uid and ppid.
    if "bpf" not in backends():
        pytest.skip(f"BPF backend unavailable here: {spawnkit.ps_backend()[1]}")
    r = subprocess.run([PY, "-c", DROP_UNDER_HIDEPID], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend_before"] == ["bpf", None]
    assert [1, 0] in out["before"]
    visible = set(out["proc"])
    assert 1 not in visible and out["me"] in visible, out["proc"]
    after = out["after"]
    assert [out["me"], 65534] in after, after
    assert all(uid == 65534 and pid in visible for pid, uid in after), after
    backend, reason = out["backend_after"]
    assert backend == "procfs" and "CAP_BPF" in reason, out["backend_after"]
    # memory() reads /proc afresh on every call: it too sees only what /proc shows.
    assert out["memory"] and set(out["memory"]) <= visible, out["memory"]


def test_memory_of_own_process():
    m = spawnkit.memory(os.getpid())
    assert len(m) == 1 and m[0].pid == os.getpid() and m[0].status == "measured"
    m = m[0]
    assert m.rss > 0 and 0 < m.pss <= m.rss and 0 < m.uss <= m.pss
    assert m.pss == m.pss_anon + m.pss_file + m.pss_shmem
    d = m.as_dict()
    assert set(d) == {"pid", "comm", "status", "rss", "pss", "pss_anon", "pss_file",
                      "pss_shmem", "uss", "shmem_private", "swap", "swap_pss", "shared_clean",
                      "shared_dirty", "private_clean", "private_dirty"}
    assert all(d[k] == getattr(m, k) for k in d)
    top = spawnkit.memory(top=3)
    assert len(top) == 3
    # Largest RSS first; a process that could not be read (rss unknown) after those that were.
    status = [t.status for t in top]
    assert status == sorted(status, key=lambda s: s == "denied"), top
    known = [t.rss for t in top if t.status != "denied"]
    assert known == sorted(known, reverse=True), top


def test_memory_denied_is_unknown_not_zero():
    # Root of a user namespace of its own is refused every process outside it: the child
    # asks for the memory of this test's process and must get "denied" and None, not zeros.
    code = textwrap.dedent("""
        import json, spawnkit, sys
        m = spawnkit.memory(int(sys.argv[1]))[0]
        print(json.dumps([m.status, m.rss, m.uss, m.as_dict(), repr(m)]))
    """)
    try:
        r = spawnkit.Command(PY).args(["-c", code, str(os.getpid())]).map_root_user().output()
    except OSError as e:
        pytest.skip(f"no user namespaces here: {e}")
    assert r.returncode == 0, r.stderr.decode()
    status, rss, uss, d, rep = json.loads(r.stdout)
    assert (status, rss, uss) == ("denied", None, None)
    assert d["status"] == "denied" and d["pid"] == os.getpid()
    assert all(v is None for k, v in d.items() if k not in ("pid", "comm", "status")), d
    assert 'status="denied"' in rep and "rss=" not in rep


@pytest.mark.skipif(not is_root(), reason="reading map_files needs root")
def test_shared_region_counted_once_with_its_memory():
    with Fixture("shm-fixture", "200", "50", "100") as f:
        parent = int(f.words[0])
        regions = [r for r in spawnkit.shared_regions() if parent in r.pids]
        assert len(regions) == 1, regions
        r = regions[0]
        assert (r.kind, r.size_bytes, r.resident_bytes, r.pids) == (
            "anonymous", 200 * MIB, 100 * MIB, [parent])
        assert r.name == "/dev/zero (deleted)"
        d = r.as_dict()
        assert {"dev", "inode", "name", "size_bytes", "resident_bytes", "pids"} <= set(d)
        st = os.stat(f"/proc/{parent}/map_files/{f.words[1]}-{f.words[2]}")
        assert d["inode"] == st.st_ino
        assert d["dev"] == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        rep = spawnkit.shared_report([parent])
        assert [x.inode for x in rep.regions] == [r.inode]
        assert rep.total_resident_bytes == 100 * MIB
        # The parent itself never touched the region: its RSS shows none of it.
        assert spawnkit.memory(parent)[0].rss < 20 * MIB


@pytest.mark.skipif(not is_root(), reason="reading map_files needs root")
def test_shmem_kept_out_of_uss():
    with Fixture("shm-fixture", "64", "0", "0", "32") as f:
        m = spawnkit.memory(int(f.words[0]))[0]
        assert m.pss_shmem >= 32 * MIB
        assert m.shmem_private >= 32 * MIB
        assert m.uss + m.shmem_private == m.private_clean + m.private_dirty
        assert m.uss < 16 * MIB
