"""Isolation through the native API (spawnkit.Command), seen from inside the child: namespace
ids, pid 1, uid maps, private /tmp, read-only binds, loopback-only network, hostname, chroot,
the lock, the cgroup; the exceptions a refusal or a conflict raises.

What needs privileges this machine lacks is skipped with the reason. Each option is checked
with every strategy that supports it; posix-spawn must refuse the ones it cannot do."""

import errno
import fcntl
import json
import os
import signal
import subprocess as std
import sys
import textwrap
import time
import uuid

import pytest

import spawnkit
from conftest import PY, is_root
from spawnkit import Command

# Strategies that create namespaces (posix-spawn cannot).
NS_STRATEGIES = ["clone-vfork", "fork-exec"]
NS_LINKS = {"user": "user", "mount": "mnt", "net": "net", "pid": "pid", "uts": "uts",
            "ipc": "ipc", "cgroup": "cgroup"}


def child(code):
    """A Command running a small Python child (-S: fast start)."""
    return Command(PY).args(["-S", "-c", textwrap.dedent(code)])


# The interpreter itself, not the venv's link to it: a private /tmp hides a venv made under
# /tmp (a fresh clone there), and the probes need only the standard library.
REAL_PY = os.path.realpath(PY)


def child_outside_tmp(code):
    """`child(code)` with an interpreter that a private /tmp does not hide."""
    if REAL_PY.startswith("/tmp/"):
        pytest.skip(f"the interpreter {REAL_PY} lives under /tmp, which a private /tmp hides")
    return Command(REAL_PY).args(["-S", "-c", textwrap.dedent(code)])


def run_json(cmd):
    """Run the child, which prints one JSON value; return it."""
    r = cmd.output()
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def userns_or_skip():
    """Namespaces need root, or unprivileged user namespaces (added automatically)."""
    if is_root():
        return
    try:
        Command("true").unshare("user").status()
    except OSError as e:
        pytest.skip(f"no root and no unprivileged user namespaces here: {e}")


def own_ns(link):
    return os.readlink(f"/proc/self/ns/{link}")


NS_PROBE = """
    import json, os
    print(json.dumps({n: os.readlink('/proc/self/ns/' + n) for n in %r}))
""" % sorted(NS_LINKS.values())


# ---------------------------------------------------------------- namespaces

@pytest.mark.parametrize("strategy,name", [
    (s, n) for s in NS_STRATEGIES for n in NS_LINKS
    if (s, n) != ("fork-exec", "pid")  # refused: test_fork_exec_refuses_a_pid_namespace
])
def test_each_namespace_is_new_inside(strategy, name):
    userns_or_skip()
    seen = run_json(child(NS_PROBE).unshare([name]).strategy(strategy))
    link = NS_LINKS[name]
    assert seen[link] != own_ns(link), f"{name}: not new"
    if is_root():  # unprivileged, a user namespace is added too
        for other in NS_LINKS.values():
            if other != link:
                assert seen[other] == own_ns(other), f"{name}: {other} changed too"


def test_unshare_forms_add_up():
    userns_or_skip()
    seen = run_json(child(NS_PROBE).unshare("uts, ipc").unshare({"network"}).unshare(("mnt",)))
    for link in ("uts", "ipc", "net", "mnt"):
        assert seen[link] != own_ns(link)
    assert seen["pid"] == own_ns("pid")
    assert spawnkit.NAMESPACES == ("user", "mount", "net", "pid", "uts", "ipc", "cgroup")


def test_bad_namespace_names():
    with pytest.raises(ValueError, match='unshare "nope": unknown namespace'):
        Command("true").unshare("net,nope")
    with pytest.raises(TypeError):
        Command("true").unshare([1])  # type: ignore[list-item]


def test_namespace_lists_name_at_least_one_and_no_empty_item():
    # The library's rule, as for spawnkit run --unshare.
    for empty in ["", " ", [], [""]]:
        with pytest.raises(ValueError, match="no namespace named"):
            Command("true").unshare(empty)
    for gap in ["user,,net", "net,", ["user", ""], ["user", " "]]:
        with pytest.raises(ValueError, match="an empty name in the list"):
            Command("true").unshare(gap)
    cmd = Command("true").unshare("net")
    with pytest.raises(ValueError):
        cmd.unshare("")
    ns = [line for line in cmd.plan().splitlines() if line.startswith("clone with new ")]
    assert ns and ns[0].endswith("net"), ns  # the refused call added nothing


def test_pid_namespace_makes_the_program_pid_1():
    userns_or_skip()
    code = """
        import json, os, sys
        print(json.dumps([os.getpid(), os.getppid(), os.readlink('/proc/self'),
                          sorted(int(p) for p in os.listdir('/proc') if p.isdigit())]),
              flush=True)
        sys.exit(7)
    """
    r = child(code).unshare("pid,mount").output()
    pid, ppid, proc_self, pids = json.loads(r.stdout)
    assert (pid, ppid, proc_self, pids) == (1, 0, "1", [1])  # the fresh /proc shows only it
    assert r.returncode == 7  # its exit status still reaches the parent
    # Without a mount namespace the parent's /proc stays: the program is still pid 1.
    assert run_json(child("import json, os; print(json.dumps(os.getpid()))").unshare("pid")) == 1


def test_fork_exec_refuses_a_pid_namespace():
    with pytest.raises(ValueError, match="clone-vfork") as e:
        Command("true").unshare("pid").strategy("fork-exec").status()
    assert e.value.step == "unshare"


@pytest.mark.parametrize("configure", [
    lambda c: c.unshare("net"),
    lambda c: c.unshare(["user"]),
    lambda c: c.map_root_user(),
    lambda c: c.private_tmp(),
    lambda c: c.ro_bind("/usr"),
    lambda c: c.private_network(),
    lambda c: c.hostname("box"),
], ids=["unshare", "user", "map_root_user", "private_tmp", "ro_bind", "private_network",
        "hostname"])
def test_posix_spawn_refuses_namespaces(configure):
    cmd = configure(Command("true").strategy("posix-spawn"))
    with pytest.raises(ValueError, match="posix-spawn strategy cannot create namespaces") as e:
        cmd.status()
    assert e.value.step == "unshare" and e.value.in_child is False


def test_posix_spawn_refuses_chroot_and_cgroup():
    with pytest.raises(ValueError, match="chroot"):
        Command("true").strategy("posix-spawn").chroot("/").status()
    with pytest.raises(ValueError, match="cgroup"):
        Command("true").strategy("posix-spawn").cgroup("/sys/fs/cgroup").status()


# ---------------------------------------------------------------- user namespaces

ID_PROBE = """
    import json, os
    print(json.dumps([os.getuid(), os.geteuid(), os.getgid(), os.getegid(),
                      open('/proc/self/uid_map').read().split(),
                      open('/proc/self/gid_map').read().split(),
                      open('/proc/self/setgroups').read().strip()]))
"""


@pytest.mark.parametrize("strategy", NS_STRATEGIES)
def test_map_root_user(strategy):
    userns_or_skip()
    uid, gid = os.geteuid(), os.getegid()
    seen = run_json(child(ID_PROBE).map_root_user().strategy(strategy))
    assert seen[:4] == [0, 0, 0, 0]
    assert seen[4] == ["0", str(uid), "1"] and seen[5] == ["0", str(gid), "1"]
    # Root writes the maps from outside with clone-vfork, so setgroups stays usable; the
    # child writes its own (after "deny") otherwise.
    assert seen[6] == ("allow" if is_root() and strategy == "clone-vfork" else "deny")


def test_map_current_user():
    userns_or_skip()
    uid, gid = os.geteuid(), os.getegid()
    seen = run_json(child(ID_PROBE).map_current_user())
    assert seen[:4] == [uid, uid, gid, gid]
    assert seen[4] == [str(uid), str(uid), "1"] and seen[5] == [str(gid), str(gid), "1"]


def test_custom_id_maps():
    if not is_root():
        pytest.skip("arbitrary id maps need CAP_SETUID/CAP_SETGID outside (root)")
    seen = run_json(child(ID_PROBE).uid_map([(0, 0, 1), (1, 100000, 1000)])
                    .gid_map([(0, 0, 1), (1, 200000, 10)]))
    assert seen[:4] == [0, 0, 0, 0]
    assert seen[4] == ["0", "0", "1", "1", "100000", "1000"]
    assert seen[5] == ["0", "0", "1", "1", "200000", "10"]
    # A map without the caller's id: the child's ids are the overflow id inside.
    seen = run_json(child(ID_PROBE).uid_map([(0, 100000, 10)]).gid_map([(0, 100000, 10)]))
    assert seen[0] == int(open("/proc/sys/kernel/overflowuid").read())
    with pytest.raises(ValueError, match="clone-vfork"):
        child(ID_PROBE).uid_map([(0, 0, 1)]).strategy("fork-exec").status()
    with pytest.raises(ValueError, match="inside, outside, count"):
        Command("true").uid_map([(0, 0)])


def interpreter_for_nobody(pkg):
    """A Python of this version that nobody can run and that imports spawnkit from `pkg`."""
    version = "%d.%d" % sys.version_info[:2]
    for exe in (PY, f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if not os.path.exists(exe):
            continue
        probe = (Command(exe).args(["-c", "import spawnkit"]).uid(65534).gid(65534).groups([])
                 .env("PYTHONPATH", pkg).current_dir("/").stderr(spawnkit.DEVNULL))
        try:
            if probe.status() == 0:
                return exe
        except OSError:
            pass
    return None


def test_unprivileged_map_root_user():
    # A child running as nobody spawns with map_root_user: the unprivileged path (the child
    # writes its own one-line maps from inside, after "deny" in setgroups).
    if not is_root():
        pytest.skip("needs root to become nobody first")
    pkg = os.path.dirname(os.path.dirname(spawnkit.__file__))
    exe = interpreter_for_nobody(pkg)
    if exe is None:
        pytest.skip(f"no Python {sys.version_info[0]}.{sys.version_info[1]} that nobody can "
                    f"run and that imports spawnkit from {pkg}")
    code = textwrap.dedent("""
        import json, spawnkit, sys
        try:
            r = spawnkit.Command(sys.executable).args(['-S', '-c', %r]).map_root_user().output()
        except OSError as e:
            print(json.dumps({"refused": [e.errno, e.step, str(e)]}))
        else:
            sys.stdout.buffer.write(r.stdout)
            sys.stderr.buffer.write(r.stderr)
    """) % textwrap.dedent(ID_PROBE)
    r = (Command(exe).args(["-c", code]).uid(65534).gid(65534).groups([])
         .env("PYTHONPATH", pkg).current_dir("/").output())
    assert r.returncode == 0, r.stderr.decode()
    seen = json.loads(r.stdout)
    if isinstance(seen, dict):
        err, step, msg = seen["refused"]
        if step.startswith("clone") and err in (errno.EPERM, errno.EACCES, errno.ENOSPC):
            pytest.skip(f"no unprivileged user namespaces here: {msg}")
        pytest.fail(msg)
    assert seen[:4] == [0, 0, 0, 0]
    assert seen[4] == ["0", "65534", "1"] and seen[6] == "deny"


# ---------------------------------------------------------------- root inside cannot undo them

ZERO_CAPS = "".join(f"{s}:\t0000000000000000\n" for s in ("CapInh", "CapPrm", "CapEff",
                                                            "CapBnd", "CapAmb"))


def sh(script):
    return Command("sh").args(["-c", script]).stderr(spawnkit.DEVNULL)


@pytest.fixture
def host_secret():
    """A file only the parent's /tmp has, readable by everyone."""
    path = f"/tmp/spawnkit-py-fence-{uuid.uuid4().hex}"
    with open(path, "w") as f:
        f.write("the-host-secret\n")
    os.chmod(path, 0o644)
    yield path
    os.unlink(path)


@pytest.mark.skipif(not is_root(), reason="the escapes need root (or root of a user namespace)")
@pytest.mark.parametrize("strategy", NS_STRATEGIES)
def test_root_inside_cannot_undo_the_fences(strategy, host_secret, tmp_path):
    undo_tmp = f"umount /tmp; umount -l /tmp; cat {host_secret}; cat /proc/$PPID/root{host_secret}"
    out = sh(undo_tmp).private_tmp().strategy(strategy).output().stdout
    assert b"the-host-secret" not in out
    bound = tmp_path / "bound"
    bound.mkdir()
    (bound / "f").write_text("orig\n")
    undo_ro = f"mount -o remount,bind,rw {bound}; umount -l {bound}; echo changed >> {bound}/f"
    sh(undo_ro).ro_bind(bound).strategy(strategy).status()
    assert (bound / "f").read_text() == "orig\n"
    caps = sh("grep ^Cap /proc/self/status").private_tmp().strategy(strategy).output().stdout
    assert caps.decode() == ZERO_CAPS
    # The opt-out: root keeps its capabilities and can undo them.
    out = sh(undo_tmp).private_tmp().keep_capabilities().strategy(strategy).output().stdout
    assert b"the-host-secret" in out
    sh(undo_ro).ro_bind(bound).keep_capabilities().strategy(strategy).status()
    assert "changed" in (bound / "f").read_text()


@pytest.mark.parametrize("strategy", NS_STRATEGIES)
def test_a_private_network_with_a_mount_namespace_has_its_own_sysfs(strategy):
    userns_or_skip()
    cmd = Command("ls").args(["/sys/class/net"]).private_network().private_tmp()
    assert cmd.strategy(strategy).output().stdout == b"lo\n"


def test_the_spawners_session_keyring_stays_outside(tmp_path):
    # A key the spawner added to its session keyring: a fenced child has a session keyring of
    # its own and cannot read it; an unfenced child (or --keep-caps) shares the spawner's.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    sys_add_key, sys_keyctl, keyctl_read, session = 248, 250, 11, -3
    key = libc.syscall(sys_add_key, b"user", f"spawnkit-{uuid.uuid4().hex}".encode(),
                       b"s3cret", 6, ctypes.c_int(session))
    if key < 0:
        pytest.skip(f"add_key: errno {ctypes.get_errno()}")
    try:
        code = f"""
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            buf = ctypes.create_string_buffer(64)
            n = libc.syscall({sys_keyctl}, {keyctl_read}, {key}, buf, 64)
            print(buf.raw[:n].decode() if n >= 0 else ctypes.get_errno())
        """
        userns_or_skip()
        fenced = child_outside_tmp(code).private_tmp().output().stdout.decode().strip()
        assert fenced == str(errno.EACCES)
        assert child(code).output().stdout == b"s3cret\n"
        kept = child_outside_tmp(code).private_tmp().keep_capabilities().output().stdout
        assert kept == b"s3cret\n"
    finally:
        libc.syscall(sys_keyctl, 3, key)  # KEYCTL_REVOKE


def test_plan_shows_the_capabilities_dropped():
    steps = Command("true").private_tmp().uid(1).plan()
    assert "prctl PR_CAPBSET_DROP every capability" in steps
    assert steps.index("PR_CAPBSET_DROP") < steps.index("setresuid") < steps.index("capset")
    assert "capset" not in Command("true").private_tmp().keep_capabilities().plan()
    assert "capset" not in Command("true").map_root_user().plan()


# ---------------------------------------------------------------- mounts

TMP_PROBE = """
    import json, os
    os.mkdir('/tmp/made-inside')
    opts = [l.split()[5] for l in open('/proc/self/mountinfo') if l.split()[4] == '/tmp']
    print(json.dumps([sorted(os.listdir('/tmp')), opts[-1].split(',')]))
"""


@pytest.mark.parametrize("strategy", NS_STRATEGIES)
def test_private_tmp_is_fresh_and_does_not_leak(strategy):
    userns_or_skip()
    marker = f"/tmp/spawnkit-outside-{uuid.uuid4().hex}"
    open(marker, "w").close()
    try:
        listing, opts = run_json(child_outside_tmp(TMP_PROBE).private_tmp().strategy(strategy))
    finally:
        os.unlink(marker)
    assert listing == ["made-inside"]  # nothing of ours; the child's directory...
    assert not os.path.exists("/tmp/made-inside")  # ...never reached our /tmp
    assert {"nosuid", "nodev"} <= set(opts) and "noexec" not in opts
    _, opts = run_json(child_outside_tmp(TMP_PROBE).private_tmp(True, nosuid=False, noexec=True))
    assert "noexec" in opts and "nosuid" not in opts


def test_private_tmp_from_a_directory(tmp_path):
    userns_or_skip()
    (tmp_path / "seen").write_text("")
    listing, opts = run_json(child_outside_tmp(TMP_PROBE).private_tmp(tmp_path, noexec=True))
    assert listing == ["made-inside", "seen"]
    assert (tmp_path / "made-inside").is_dir()  # writes land in the directory
    assert "noexec" in opts
    assert not os.path.exists("/tmp/made-inside")


def test_private_tmp_false_turns_it_off():
    seen = run_json(child_outside_tmp(NS_PROBE).private_tmp().private_tmp(False))
    assert seen["mnt"] == own_ns("mnt")


def test_read_only_binds(tmp_path):
    userns_or_skip()
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "file").write_text("from src")
    code = f"""
        import json, os
        out = [open({str(dst / 'file')!r}).read()]
        for path in ({str(dst / 'new')!r}, {str(src / 'new')!r}):
            try:
                open(path, 'w').close()
                out.append('written')
            except OSError as e:
                out.append(e.errno)
        print(json.dumps(out))
    """
    seen = run_json(child(code).ro_bind(src, dst).ro_bind(str(src)))
    assert seen == ["from src", errno.EROFS, errno.EROFS]
    assert not (src / "new").exists() and not (dst / "file").exists()  # no leak outside


def test_chroot_sees_only_the_new_root(tmp_path):
    userns_or_skip()
    root = tmp_path / "root"
    for d in ("usr", "etc", "proc", "work"):
        (root / d).mkdir(parents=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        target = os.readlink(f"/{link}") if os.path.islink(f"/{link}") else None
        if target is None:
            pytest.skip(f"/{link} is not a symlink into /usr (no merged /usr here)")
        os.symlink(target, root / link)
    (root / "work" / "note").write_text("inside")
    cmd = (Command("/bin/sh").args(["-c", "pwd; ls /; cat note"])
           .ro_bind("/usr", root / "usr").chroot(root).current_dir("/work"))
    r = cmd.output()
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0] == "/work"
    assert "root" not in lines and "tmp" not in lines and "work" in lines
    assert lines[-1] == "inside"
    with pytest.raises(FileNotFoundError) as e:
        Command("true").chroot("/nonexistent-root").status()
    assert e.value.filename == "/nonexistent-root" and e.value.step == "chroot"
    assert e.value.in_child is True


# ---------------------------------------------------------------- network, hostname

NET_PROBE = """
    import json, socket
    ifaces = [l.split(':')[0].strip() for l in open('/proc/self/net/dev').readlines()[2:]]
    server = socket.socket()
    server.bind(('127.0.0.1', 0))
    server.listen(1)
    try:
        client = socket.create_connection(server.getsockname(), timeout=10)
        conn, _ = server.accept()
        client.sendall(b'ping')
        echoed = conn.recv(4).decode()
    except OSError as e:
        echoed = e.errno
    print(json.dumps([ifaces, echoed]))
"""


@pytest.mark.parametrize("strategy", NS_STRATEGIES)
def test_private_network_has_only_loopback_and_it_works(strategy):
    userns_or_skip()
    ifaces, echoed = run_json(child(NET_PROBE).private_network().strategy(strategy))
    assert ifaces == ["lo"] and echoed == "ping"
    # A bare net namespace leaves lo down, as unshare -n does.
    ifaces, echoed = run_json(child(NET_PROBE).unshare("net"))
    assert ifaces == ["lo"] and echoed == errno.ENETUNREACH


@pytest.mark.parametrize("strategy", NS_STRATEGIES)
def test_hostname(strategy):
    userns_or_skip()
    code = "import json, socket; print(json.dumps(socket.gethostname()))"
    assert run_json(child(code).hostname("spawnkit-box").strategy(strategy)) == "spawnkit-box"
    assert run_json(child(code)) == socket_hostname()  # ours is unchanged
    with pytest.raises(ValueError, match="1 to 64 bytes"):
        Command("true").hostname("x" * 65).status()


@pytest.mark.parametrize("strategy", NS_STRATEGIES)
def test_hostname_bytes(strategy):
    # sethostname(2) takes bytes, as socket.sethostname does: str or bytes, any bytes.
    userns_or_skip()
    cmd = Command("cat").args(["/proc/sys/kernel/hostname"]).strategy(strategy)
    assert cmd.hostname(b"box-\xff\xfe").output().stdout == b"box-\xff\xfe\n"
    assert cmd.hostname("box-\udcff").output().stdout == b"box-\xff\n"  # os.fsencode's
    with pytest.raises(ValueError, match="1 to 64 bytes"):
        Command("true").hostname(b"\xff" * 65).status()
    with pytest.raises(TypeError, match="str or bytes"):
        Command("true").hostname(42).status()


def socket_hostname():
    import socket

    return socket.gethostname()


# ---------------------------------------------------------------- lock

def held_elsewhere(path):
    """Whether someone holds an exclusive-conflicting lock on path (probe with our own)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


@pytest.fixture
def locked(tmp_path):
    """A lock file we hold exclusively (released at the end of the test)."""
    path = tmp_path / "held.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    yield path
    os.close(fd)


def test_lock_conflict_nonblock_is_blocking_io_error(locked):
    with pytest.raises(BlockingIOError) as e:
        Command("true").lock(locked, nonblock=True).status()
    err = e.value
    assert err.errno == errno.EWOULDBLOCK and err.filename == locked
    assert err.step == "flock" and err.in_child is False
    assert str(locked) in err.strerror and "would block" in err.strerror
    with pytest.raises(BlockingIOError):
        Command("true").lock(str(locked), timeout=0).status()  # timeout 0 = nonblock


def test_lock_conflict_timeout_is_timeout_error(locked):
    start = time.monotonic()
    with pytest.raises(TimeoutError) as e:
        Command("true").lock(locked, timeout=0.2).status()
    assert time.monotonic() - start >= 0.2
    err = e.value
    assert err.errno == errno.ETIMEDOUT and err.filename == locked and err.step == "flock"
    assert "still locked after 0.200 s" in err.strerror
    # Shared against exclusive conflicts too.
    with pytest.raises(TimeoutError):
        Command("true").lock(locked, shared=True, timeout=0.05).status()


def test_lock_shared_with_shared(tmp_path):
    path = tmp_path / "shared.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        assert Command("true").lock(path, shared=True, nonblock=True).status() == 0
        with pytest.raises(BlockingIOError):
            Command("true").lock(path, nonblock=True).status()
    finally:
        os.close(fd)


@pytest.mark.parametrize("strategy", list(spawnkit.STRATEGIES) + ["fork-exec+pre_exec"])
def test_the_child_holds_the_lock_for_its_life(tmp_path, strategy):
    path = tmp_path / "sub" / "life.lock"
    path.parent.mkdir()
    cmd = Command("sh").args(["-c", "read line"]).stdin(spawnkit.PIPE).lock(path)
    if strategy.endswith("+pre_exec"):
        # A preexec_fn makes fds it did not get close at exec: the lock's fd must survive.
        cmd.pre_exec(lambda: None)
    else:
        cmd.strategy(strategy)
    p = cmd.spawn()
    try:
        assert path.exists()  # created when missing, as flock(1)
        assert held_elsewhere(path)
        with pytest.raises(BlockingIOError):
            Command("true").lock(path, nonblock=True).status()
    finally:
        p.communicate(b"done\n")
    assert p.returncode == 0
    assert not held_elsewhere(path)  # released with the child
    assert Command("true").lock(path, nonblock=True).status() == 0


def test_lock_wait_ends_when_released(tmp_path):
    # A waiter with no timeout gets the lock once the holder lets go.
    holder = Command("sleep").arg("0.3").lock(tmp_path / "relay.lock").spawn()
    assert Command("true").lock(tmp_path / "relay.lock").status() == 0
    assert holder.wait() == 0


def test_lock_wait_is_interrupted_by_ctrl_c(locked):
    # A Python started in the background (`scripts/test &`) inherits SIGINT ignored and
    # leaves it so: Ctrl-C's handler first, as a Python in the foreground has it.
    code = textwrap.dedent(f"""
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from spawnkit import Command
        print("waiting", flush=True)
        try:
            Command("true").lock({str(locked)!r}).status()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(spawnkit.__file__)))
    p = std.Popen([PY, "-c", code], stdout=std.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline() == "waiting\n"
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=30)
    finally:
        p.kill()
        p.wait()
    assert out == "interrupted\n"


def test_bad_lock_arguments(tmp_path):
    with pytest.raises(ValueError, match="exclude"):
        Command("true").lock(tmp_path / "x", nonblock=True, timeout=1)
    with pytest.raises(ValueError, match=">= 0"):
        Command("true").lock(tmp_path / "x", timeout=-1)
    with pytest.raises(ValueError, match=">= 0"):
        Command("true").lock(tmp_path / "x", timeout=float("nan"))
    with pytest.raises(FileNotFoundError):
        Command("true").lock(tmp_path / "no" / "dir" / "x").status()


# ---------------------------------------------------------------- cgroup

def writable_cgroup2():
    """A cgroup v2 mount we may create a directory in, or None."""
    try:
        mounts = open("/proc/self/mounts").read().splitlines()
    except OSError:
        return None
    for line in mounts:
        _, where, kind = line.split()[:3]
        if kind == "cgroup2" and os.access(where, os.W_OK):
            return where
    return None


@pytest.fixture
def cgroup_dir():
    root = writable_cgroup2()
    if root is None:
        pytest.skip("no writable cgroup v2 mount here")
    # Our own cgroup, as the kernel names it relative to the cgroup2 root.
    own = [l for l in open("/proc/self/cgroup").read().splitlines() if l.startswith("0::")]
    base = os.path.join(root, own[0][3:].lstrip("/")) if own else root
    path = os.path.join(base, f"spawnkit-test-{uuid.uuid4().hex[:12]}")
    try:
        os.mkdir(path)
    except OSError as e:
        pytest.skip(f"cannot create a cgroup under {base}: {e}")
    yield path, "/" + os.path.relpath(path, root)
    for _ in range(100):  # the child's exit reaches the cgroup shortly after the reap
        try:
            os.rmdir(path)
            break
        except OSError:
            time.sleep(0.01)


@pytest.mark.parametrize("strategy", NS_STRATEGIES)
def test_cgroup_placement(cgroup_dir, strategy):
    path, rel = cgroup_dir
    code = """
        import json
        print(json.dumps([l for l in open('/proc/self/cgroup').read().splitlines()
                          if l.startswith('0::')]))
    """
    assert run_json(child(code).cgroup(path).strategy(strategy)) == [f"0::{rel}"]
    with open(os.path.join(path, "cgroup.procs")) as f:
        assert f.read() == ""  # gone with the child


def test_cgroup_v1_or_missing_path_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not a cgroup v2 directory") as e:
        Command("true").cgroup(tmp_path).status()
    assert e.value.step == "cgroup"
    with pytest.raises(FileNotFoundError):
        Command("true").cgroup(tmp_path / "missing").status()


# ---------------------------------------------------------------- plan, path search

def test_plan_shows_the_isolation_steps(tmp_path):
    steps = (Command("true").unshare("pid").map_root_user().private_tmp().ro_bind("/usr")
             .hostname("box").lock(tmp_path / "p.lock", timeout=1).plan())
    assert "clone with new namespaces: user,mount,pid,uts" in steps
    assert "mount bind /usr on /usr" in steps and 'sethostname "box"' in steps
    assert f"flock {tmp_path / 'p.lock'} LOCK_EX" in steps


def test_path_search(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "sk-tool").write_bytes(b"\x00\x01 not a program")
    (a / "sk-tool").chmod(0o755)
    (b / "sk-tool").write_text("#!/bin/sh\necho second\n")
    (b / "sk-tool").chmod(0o755)
    cmd = Command("sk-tool").env("PATH", f"{a}:{b}")
    with pytest.raises(OSError) as e:  # execvp's rules (the default) stop at ENOEXEC
        cmd.output()
    assert e.value.errno == errno.ENOEXEC and e.value.filename == "sk-tool"
    assert cmd.path_search("try-all").output().stdout == b"second\n"
    with pytest.raises(OSError):
        cmd.path_search("execvp").status()  # and back
    with pytest.raises(ValueError, match="unknown path search"):
        cmd.path_search("first")


BINDS = 4000


def _stopped(pid):
    """Wait (at most 1 s) until `pid` is stopped; False if it is gone or never stops."""
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(") ", 1)[1][:1]
        except (OSError, IndexError):
            return False
        if state == "T":
            return True
        time.sleep(0)
    return False


def _binds_of(pid, d):
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            return sum(1 for line in f if f" {d} " in line)
    except OSError:
        return BINDS


def _kill_first_child_before_exec(parent, d, found):
    """SIGKILL the first child of `parent` caught in its bind steps: it still runs this
    interpreter's image, in a mount namespace other than `parent`'s, and once stopped it has
    fewer than BINDS mounts of `d` (so the kill cannot land after its report of the exec
    step). A child caught too late is let go on (SIGCONT). Its pid goes into `found`."""
    exe = os.readlink("/proc/self/exe")
    mnt = os.readlink(f"/proc/{parent}/ns/mnt")
    let_go = set()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for t in os.listdir(f"/proc/{parent}/task"):
            try:
                with open(f"/proc/{parent}/task/{t}/children") as f:
                    kids = [int(c) for c in f.read().split()]
            except OSError:
                continue
            for c in kids:
                try:
                    if (c in let_go or os.readlink(f"/proc/{c}/exe") != exe
                            or os.readlink(f"/proc/{c}/ns/mnt") == mnt):
                        continue
                    os.kill(c, signal.SIGSTOP)
                    if _stopped(c) and os.readlink(f"/proc/{c}/exe") == exe and _binds_of(c, d) < BINDS:
                        os.kill(c, signal.SIGKILL)
                        found.append(c)
                        return
                    os.kill(c, signal.SIGCONT)
                    let_go.add(c)
                except OSError:
                    continue


@pytest.mark.skipif(not is_root(), reason="needs root: the bind mounts that widen the window")
@pytest.mark.parametrize("via_server", [False, True], ids=["local", "server"])
def test_killed_before_exec_under_subprocess_rules(tmp_path, via_server):
    """A child killed by a signal before its exec, no step failing: under subprocess_rules
    (what spawnkit.subprocess.Popen builds) a child whose wait() gives -SIGKILL, as CPython's
    Popen reads an error pipe that closed empty; otherwise ChildProcessError naming the
    signal. BINDS read-only binds widen the window; a thread beside kills the child in it
    (a child it was too late for runs /bin/true, and the case is tried again)."""
    import threading

    srv = spawnkit.Server() if via_server else None
    try:
        parent = srv.pid if srv is not None else os.getpid()
        for rules in (True, False):
            for attempt in range(5):
                cmd = Command("/bin/true", subprocess_rules=rules)
                for _ in range(BINDS):
                    cmd.ro_bind(str(tmp_path))
                found = []
                t = threading.Thread(target=_kill_first_child_before_exec,
                                     args=(parent, str(tmp_path), found))
                t.start()
                try:
                    if rules:
                        child = cmd.spawn_child(via=srv)
                        status = child.wait()
                    else:
                        try:
                            child = cmd.spawn_child(via=srv)
                            status = child.wait()
                        except ChildProcessError as e:
                            status = e
                finally:
                    t.join()
                if found:
                    break
                assert status == 0, f"not caught, and not fine either: {status!r}"
            assert found, "the test caught no child before its exec"
            if rules:
                assert status == -signal.SIGKILL
            else:
                assert isinstance(status, ChildProcessError), status
                assert "killed by SIGKILL before execve" in str(status)
    finally:
        if srv is not None:
            srv.close()
