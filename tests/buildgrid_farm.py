"""A real build farm for the `spawnkit worker` tests: BuildGrid from PyPI (in a venv of its
own), a throwaway PostgreSQL from Debian's package (in a temporary directory, run by an
unprivileged user created for it), and spawnkit workers.

`Farm` installs what is missing (pip; apt-get as root), or raises `Unavailable` with the
reason when it cannot; the tests turn that into a loud skip.
"""

import contextlib
import json
import os
import pathlib
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILDGRID = "buildgrid[database]==0.4.4"
VENV = pathlib.Path(os.environ.get("SPAWNKIT_BUILDGRID_VENV", ROOT / ".venv-buildgrid"))
PG_USER = "spawnkit-pg"
CLIENT = pathlib.Path(__file__).resolve().parent / "reapi_client.py"
# Set (`spawnkit bench worker --no-install`): use BuildGrid and PostgreSQL if installed, never install.
NO_INSTALL = os.environ.get("SPAWNKIT_FARM_NO_INSTALL") == "1"


class Unavailable(Exception):
    """BuildGrid or PostgreSQL cannot be had here."""


def spawnkit_bin():
    if os.environ.get("SPAWNKIT_BIN"):  # `spawnkit bench worker` names itself
        return os.environ["SPAWNKIT_BIN"]
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    p = target / "debug" / "spawnkit"
    assert p.is_file(), f"{p} is missing: build it first (cargo build --workspace --bins)"
    return str(p)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, log, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before listening:\n{tail(log)}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"not listening on {port} after {timeout}s:\n{tail(log)}")


def tail(path, n=40):
    try:
        return "\n".join(pathlib.Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def ensure_buildgrid():
    bgd = VENV / "bin" / "bgd"
    if bgd.exists():
        return bgd
    if NO_INSTALL:
        raise Unavailable(f"BuildGrid is not installed in {VENV} (--no-install)")
    if sys.version_info < (3, 11):
        raise Unavailable(f"BuildGrid 0.4.4 needs Python >= 3.11; this is {sys.version.split()[0]}")
    r = subprocess.run([sys.executable, "-m", "venv", str(VENV)], capture_output=True, text=True)
    if r.returncode != 0:
        raise Unavailable(f"cannot create {VENV}: {r.stderr.strip()}")
    r = subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", BUILDGRID],
                       capture_output=True, text=True)
    if r.returncode != 0 or not bgd.exists():
        shutil.rmtree(VENV, ignore_errors=True)
        raise Unavailable(f"pip install {BUILDGRID} failed: {r.stderr.strip()[-2000:]}")
    return bgd


def pg_bindir():
    found = sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    if NO_INSTALL:
        raise Unavailable("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb; --no-install)")
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb) and "
                          "this is not root with apt-get to install it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "postgresql"]):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise Unavailable(f"{' '.join(cmd)} failed: {r.stderr.strip()[-2000:]}")
    found = sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise Unavailable("apt-get installed postgresql but no initdb under /usr/lib/postgresql")
    return found[-1].parent


def pg_user():
    """An unprivileged user for PostgreSQL (it refuses to run as root)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                            PG_USER], capture_output=True, text=True)
        if r.returncode != 0:
            raise Unavailable(f"useradd {PG_USER} failed: {r.stderr.strip()}")
    return PG_USER


class Postgres:
    def __init__(self, base):
        self.bindir = pg_bindir()
        self.user = pg_user()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="pg-", dir=base))
        self.port = free_port()
        if self.user:
            pw = pwd.getpwnam(self.user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        os.chmod(self.dir, 0o700)
        self.log = self.dir / "log"
        self._run(["initdb", "-D", str(self.dir / "data"), "-U", "bgd", "--auth=trust", "-E", "UTF8"])
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run(["pg_ctl", "-D", str(self.dir / "data"), "-o", opts, "-l", str(self.log), "-w", "start"])
        self.url = f"postgresql+psycopg2://bgd@127.0.0.1:{self.port}/postgres"

    def _run(self, cmd):
        cmd = [str(self.bindir / cmd[0])] + cmd[1:]
        r = subprocess.run(cmd, user=self.user, capture_output=True, text=True, cwd=self.dir)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {r.stderr}{r.stdout}\n{tail(self.log)}")

    def stop(self):
        with contextlib.suppress(Exception):
            self._run(["pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.dir, ignore_errors=True)


# What every BuildGrid process of a farm listens with.
SERVER = """\
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
thread-pool-size: 100
authorization:
  method: none
monitoring:
  enabled: false
"""

CONFIG = SERVER + """\
connections:
  - !sql-connection &sql
    connection-string: {pg}
storages:
{storage}
caches:
  - !lru-action-cache &main-action
    storage: *main-storage
    max-cached-refs: 256
    allow-updates: true
schedulers:
  - !sql-scheduler &state-database
    sql: *sql
    storage: *main-storage
    action-cache: *main-action
    property-set: !dynamic-property-set
      match-property-keys: [OSFamily]
      wildcard-property-keys: [network]
    bot-session-keepalive-timeout: 30
    max-job-attempts: 5
instances:
  - name: {instance}
    services:
      - !action-cache
        cache: *main-action
      - !execution
        scheduler: *state-database
{cas_services}"""

# The CAS and ByteStream services of the scheduler's process (none when the CAS is apart: a
# worker or client that ignored the CAS server it was given would then fail, not fall back).
CAS_SERVICES = """\
      - !cas
        storage: *main-storage
      - !bytestream
        storage: *main-storage
"""


DISK_STORAGE = """\
  - !disk-storage &main-storage
    path: {cas}"""

REMOTE_STORAGE = """\
  - !remote-storage &main-storage
    url: http://127.0.0.1:{cas_port}
    instance-name: {instance}"""

# The CAS alone, in a BuildGrid process of its own, as farms deploy it (a CAS server apart
# from the scheduler's: BuildGrid's remote storage, Buildbarn's bb_storage). The scheduler's
# process stores through it.
CAS_CONFIG = SERVER + """\
storages:
  - !disk-storage &main-storage
    path: {cas}
instances:
  - name: {instance}
    services:
      - !cas
        storage: *main-storage
      - !bytestream
        storage: *main-storage
"""


def kill_session(p):
    """SIGKILL a `bgd` started by `Farm._bgd` (its session: bgd's own children too), if running."""
    if p and p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


class Farm:
    """BuildGrid + PostgreSQL + spawnkit workers, all stopped and removed by `close`."""

    instance = "main"

    def __init__(self, split_cas=False):
        """`split_cas`: the CAS and ByteStream in a second BuildGrid process, which the
        workers reach with --remote-cas, the client directly, and the scheduler's process
        through its remote storage."""
        self.bgd = ensure_buildgrid()
        self.split_cas = split_cas
        self.cas_server = None
        self.python = str(VENV / "bin" / "python")
        # Not under /tmp: the worker's tmp fence puts a fresh tmpfs there.
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="spawnkit-farm-", dir="/var/tmp"))
        os.chmod(self.tmp, 0o755)
        self.pg = None
        self.server = None
        self.workers = []
        try:
            self.pg = Postgres(self.tmp)
            r = subprocess.run([str(self.bgd), "migrate", "apply", self.pg.url], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"bgd migrate apply: {r.stderr[-3000:]}")
            (self.tmp / "cas").mkdir()
            self.port = free_port()
            self.remote = f"http://127.0.0.1:{self.port}"
            storage = DISK_STORAGE.format(cas=self.tmp / "cas")
            if split_cas:
                self.cas_port = free_port()
                self.cas_config = self.tmp / "bgd-cas.yml"
                self.cas_config.write_text(CAS_CONFIG.format(port=self.cas_port, cas=self.tmp / "cas",
                                                             instance=self.instance))
                self.start_cas_server()
                storage = REMOTE_STORAGE.format(cas_port=self.cas_port, instance=self.instance)
            self.config = self.tmp / "bgd.yml"
            self.config.write_text(CONFIG.format(port=self.port, pg=self.pg.url, storage=storage,
                                                 instance=self.instance,
                                                 cas_services="" if split_cas else CAS_SERVICES))
            self.start_server()
        except BaseException:
            self.close()
            raise

    @property
    def cas_address(self):
        """HOST:PORT of the CAS and ByteStream: the CAS's own process when it is apart, else
        the scheduler's."""
        return f"127.0.0.1:{self.cas_port if self.split_cas else self.port}"

    def start_server(self):
        self.server_log = self.tmp / "bgd.log"
        self.server = self._bgd(self.config, self.port, self.server_log)

    def start_cas_server(self):
        self.cas_log = self.tmp / "bgd-cas.log"
        self.cas_server = self._bgd(self.cas_config, self.cas_port, self.cas_log)

    def _bgd(self, config, port, log_path):
        """`bgd server start CONFIG` in a session of its own, once it listens on `port`."""
        log = open(log_path, "ab")
        p = subprocess.Popen([str(self.bgd), "server", "start", str(config)],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_port(port, p, log_path)
        return p

    def stop_server(self):
        kill_session(self.server)

    def start_worker(self, name, *extra, concurrency=2, platform="OSFamily=linux"):
        work = self.tmp / f"work-{name}"
        log_path = self.tmp / f"worker-{name}.log"
        log = open(log_path, "ab")
        cmd = [spawnkit_bin(), "worker", "--remote", self.remote, "--instance", self.instance,
               "--concurrency", str(concurrency), "--work-dir", str(work), "--platform", platform,
               "--bot-id", f"test-{name}", *extra]
        if self.split_cas:
            cmd[4:4] = ["--remote-cas", f"http://{self.cas_address}"]
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        p.log = log_path
        p.work = work
        self.workers.append(p)
        return p

    def execute(self, specs, timeout=240, in_flight=32):
        """Submit the actions with the test's own REAPI client (at most `in_flight` at once);
        their results, in order."""
        env = dict(os.environ, SPAWNKIT_REAPI_IN_FLIGHT=str(in_flight))
        r = subprocess.run([self.python, str(CLIENT), f"127.0.0.1:{self.port}", self.instance,
                            self.cas_address],
                           input=json.dumps(specs), capture_output=True, text=True, timeout=timeout,
                           env=env)
        assert r.returncode == 0, f"reapi_client failed: {r.stderr[-3000:]}\n{self.logs()}"
        return json.loads(r.stdout)

    def bgd_execute(self, *args, cwd, timeout=120):
        return subprocess.run([str(self.bgd), "execute", "--remote", self.remote, "--instance-name",
                               self.instance, "command", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)

    def bots(self):
        """BuildGrid's bots as its database has them: [bot_id, session name, max capacity]."""
        code = ("import json, sys, sqlalchemy as sa\n"
                "with sa.create_engine(sys.argv[1]).connect() as c:\n"
                "    rows = c.execute(sa.text('select bot_id, name, max_capacity from bots')).all()\n"
                "print(json.dumps([list(r) for r in rows]))")
        r = subprocess.run([self.python, "-c", code, self.pg.url], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"reading BuildGrid's bots: {r.stderr[-3000:]}"
        return json.loads(r.stdout)

    def logs(self):
        parts = [f"--- bgd.log\n{tail(self.server_log, 30)}"]
        if self.cas_server:
            parts.append(f"--- bgd-cas.log\n{tail(self.cas_log, 30)}")
        for w in self.workers:
            parts.append(f"--- {w.log.name}\n{tail(w.log, 30)}")
        return "\n".join(parts)

    def close(self):
        for w in self.workers:
            if w.poll() is None:
                w.send_signal(signal.SIGKILL)
                w.wait()
        self.stop_server()
        kill_session(self.cas_server)
        if self.pg:
            self.pg.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
