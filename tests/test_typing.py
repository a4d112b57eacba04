"""The type stubs match the implementation (mypy's stubtest) and type a typical program."""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy")

USAGE = textwrap.dedent('''
    import signal
    from spawnkit import subprocess
    import spawnkit

    r: subprocess.CompletedProcess[bytes] = subprocess.run(["echo"], capture_output=True)
    text: str = subprocess.check_output(["echo"], text=True)
    with subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as p:
        out, err = p.communicate(b"x")
        fd: int | None = p.pidfd
    with subprocess.Popen(["cat"], stdin=subprocess.PIPE, encoding="utf-8") as q:
        q.communicate("text")
    try:
        subprocess.check_call(["false"])
    except subprocess.CalledProcessError as exc:
        code: int = exc.returncode
    status, output = subprocess.getstatusoutput("ls")
    cmd = spawnkit.Command("sh").args(["-c", "ulimit -n"]).rlimit("nofile", 64).nice(1)
    cmd = cmd.parent_death_signal(signal.SIGTERM).no_new_privs().fd(3, 4).strategy("fork-exec")
    done: subprocess.CompletedProcess[bytes] = cmd.output()
    child = cmd.spawn(text=True)
    n: int = spawnkit.Command("true").status()
    steps: str = spawnkit.Command("true").plan()
    fenced = (spawnkit.Command("sh").unshare("pid,mount").unshare(["net"]).map_root_user()
              .private_tmp().private_tmp("/var/tmp", noexec=True).ro_bind("/usr")
              .ro_bind("/etc", "/mnt/etc").private_network().hostname("box").chroot("/")
              .lock("/tmp/x.lock", shared=True, timeout=1.5).lock("/tmp/y", nonblock=True)
              .cgroup("/sys/fs/cgroup/job").path_search("try-all"))
    mapped = spawnkit.Command("id").uid_map([(0, 1000, 1)]).gid_map([(0, 1000, 1)])
    names: tuple[str, ...] = spawnkit.NAMESPACES

    import asyncio
    import spawnkit.asyncio

    async def use_asyncio() -> bytes:
        proc: asyncio.subprocess.Process = await spawnkit.asyncio.create_subprocess_exec(
            "cat", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate(b"x")
        sh = await spawnkit.asyncio.create_subprocess_shell("true")
        code: int = await sh.wait()
        return out

    got: bytes = spawnkit.asyncio.run(use_asyncio())

    def use_server() -> None:
        with spawnkit.Server() as srv:
            pid: int | None = srv.pid
            child = spawnkit.Command("true").spawn(via=srv)
            subprocess.use_server(srv)
        subprocess.use_server("/run/user/1000/spawnkit/server.sock", key_file="/tmp/k")
        subprocess.use_server(None)
        remote = spawnkit.connect("/tmp/s", key_file="/tmp/s.key")
        many = spawnkit.spawn_many([spawnkit.Command("true")], via=remote)
''')


def test_stubtest():
    r = subprocess.run([sys.executable, "-m", "mypy.stubtest", "spawnkit"],
                       capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_on_a_user_program(tmp_path):
    f = tmp_path / "usage.py"
    f.write_text(USAGE)
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(f)],
                       capture_output=True, text=True, cwd=tmp_path,
                       env=dict(os.environ, MYPYPATH=""))
    assert r.returncode == 0, r.stdout + r.stderr
