"""The zygote of the ``"spawnkit"`` multiprocessing start method: a clean Python server with a
warm pool of pre-forked, unspecialised workers (Android's USAP), speaking the spawn server's
frames and HMAC handshake (the Rust decoder and auth, ``spawnkit._native``).

Started by :mod:`spawnkit.multiprocessing` through spawnkit's engine as
``python -c "from spawnkit._zygote import main; main()"`` with fd 3 its listening socket, fd 4
a pipe carrying the configuration, fd 5 the "alive" pipe (EOF: the owner is gone, exit) and
fd 6 a pipe carrying the key (never argv or the environment). It preloads, then forks the
*template* (before it reads the key, so neither the template nor any worker it forks ever has
the key in memory), then reads the key. Then:

* a client connects; SO_PEERCRED must show our uid; Challenge / Answer / Welcome as the spawn
  server (docs/protocol.md); then ``Want`` and ``Fork`` frames;
* ``Want`` n: the zygote hands the client n idle workers in ``Workers`` frames (each its pid,
  its pidfd and the zygote's end of its private socketpair), now if it has them, else as the
  template makes them; the client then sends a job straight to a worker, with no round trip
  (``Process.start()`` is one sendmsg), and asks for more off its request path;
* ``Fork``, a pickled process and its fds (the client's stock ran dry): the zygote sends it to
  an idle worker and answers with the worker's pid and pidfd (SCM_RIGHTS);
* the template forks a replacement for every worker handed out or gone, off the request path;
* workers are children of the template, reaped by the kernel (SIGCHLD ignored there), so a
  client's pidfd reports the exit status (PIDFD_INFO_EXIT, Linux 6.15+).

A worker waits on its channel; when its job arrives it resets SIGCHLD, reseeds ``random``, and
runs the process as multiprocessing's ``spawn`` child would. The zygote applied the caller's
preparation data (``spawn.prepare``: cwd, ``sys.path``, ``sys.argv``, the main module, ...)
once before forking the template, so a job carries only what differs from it (at least the
process's name and authkey).
"""

import gc
import io
import json
import os
import pickle
import random
import selectors
import signal
import socket
import struct
import sys
from multiprocessing import process, reduction, resource_tracker, spawn

from . import _native

KIND_CHALLENGE, KIND_ANSWER, KIND_WELCOME, KIND_FAILURE = 1, 2, 3, 4
KIND_SPAWNED, KIND_ERROR, KIND_FORK, KIND_WORKERS, KIND_WANT = 17, 18, 32, 33, 34
MAX_FDS = 253
# Workers in one Workers frame (two fds each, within SCM_MAX_FD).
MAX_WORKERS_PER_FRAME = 64
# Workers one client may be owed at once (a Want beyond it is capped).
MAX_OWED = 256
# A job's header: the payload's length (u64 LE); the fds come with it.
JOB_HEADER = struct.Struct("<Q")

# The fds a worker received with its job (multiprocessing's DupFd.detach reads them).
inherited_fds = []
# The caller's preparation data when applying it in the zygote failed (each worker retries it).
base_prep = None
# A dummy job a worker unpickles while idle (made by the template's warm-up).
warm_payload = b""


def frame(kind, body=b"", nfds=0, id=0):
    return _native.frame_header(kind, nfds, id, len(body)) + body


def send_nonblocking(sock, data, fds):
    """Send a whole message on a non-blocking socket: blocking only for what does not fit its
    buffer now (seldom: the client reads its connection before each start)."""
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
    try:
        sent = sock.sendmsg([data], anc, socket.MSG_NOSIGNAL)
    except BlockingIOError:
        sent = 0
    else:
        anc = []  # the fds went with the first byte
    if sent < len(data):
        sock.setblocking(True)
        try:
            rest = memoryview(data)[sent:]
            if anc:
                rest = rest[sock.sendmsg([rest], anc, socket.MSG_NOSIGNAL):]
            sock.sendall(rest, socket.MSG_NOSIGNAL)
        finally:
            sock.setblocking(False)


def send_frame(sock, kind, body=b"", fds=(), id=0):
    data = frame(kind, body, len(fds), id)
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


class _Conn:
    """A client connection: its decoder and where the handshake is."""

    def __init__(self, sock):
        self.sock = sock
        self.frames = _native.Frames()
        self.nonce = _native.auth_nonce()
        self.phase = "answer"
        self.owed = 0  # workers this client asked for (Want) and has not been sent yet


class Zygote:
    def __init__(self, listener, key, alive_fd, template, pool_size):
        self.listener = listener
        self.key = key
        self.alive_fd = alive_fd
        self.template = template  # control socket to the template
        self.pool_size = pool_size
        self.sel = selectors.DefaultSelector()
        self.conns = {}
        self.idle = []  # [(pid, channel fd, pidfd)]
        self.watched = set()  # the channels of idle workers in the selector
        self.asked = 0  # workers asked of the template, not arrived yet
        self.uid = os.geteuid()  # SO_PEERCRED reports the peer's effective uid

    # -- the pool (forked by the template)
    def refill(self):
        """Ask the template for what the pool and the clients' Wants lack."""
        owed = sum(c.owed for c in self.conns.values())
        want = self.pool_size + owed - len(self.idle) - self.asked
        if want > 0:
            self.template.sendall(b"F" * want)
            self.asked += want

    def worker_arrived(self):
        """Workers from the template: a pid (u32 LE) each, its channel and pidfd beside it."""
        data, fds, _, _ = socket.recv_fds(self.template, 4 * 64, 128)
        if not data:
            raise SystemExit(1)  # the template is gone
        pids = struct.unpack(f"<{len(data) // 4}I", data[: len(data) // 4 * 4])
        for i, pid in enumerate(pids):
            self.idle.append((pid, fds[2 * i], fds[2 * i + 1]))
        self.asked -= len(pids)

    def watch(self):
        """Watch the idle workers not handed out at once: a worker never writes to its
        channel, so readable means it died unused (EOF)."""
        for worker in self.idle:
            if worker[1] not in self.watched:
                self.sel.register(worker[1], selectors.EVENT_READ, worker)
                self.watched.add(worker[1])

    def unwatch(self, worker):
        if worker[1] in self.watched:
            self.sel.unregister(worker[1])
            self.watched.discard(worker[1])

    def take_worker(self):
        while not self.idle:
            if self.asked == 0:
                self.template.sendall(b"F")
                self.asked += 1
            self.template.setblocking(True)
            self.worker_arrived()
            self.template.setblocking(False)
        worker = self.idle.pop(0)
        self.unwatch(worker)
        return worker

    def worker_gone(self, worker):
        """An idle worker's channel read EOF: it died unused; refill replaces it."""
        if worker in self.idle:
            self.idle.remove(worker)
            self.unwatch(worker)
            os.close(worker[1])
            os.close(worker[2])

    def deliver(self):
        """Hand idle workers to the clients that asked for them (Workers frames)."""
        for conn in list(self.conns.values()):
            while conn.owed and self.idle:
                n = min(conn.owed, len(self.idle), MAX_WORKERS_PER_FRAME)
                # The newest: those just arrived, not watched yet.
                batch = self.idle[-n:]
                del self.idle[-n:]
                fds = []
                for worker in batch:
                    self.unwatch(worker)
                    fds += [worker[2], worker[1]]
                body = struct.pack(f"<{n}I", *(pid for pid, _, _ in batch))
                conn.owed -= n
                try:
                    send_nonblocking(conn.sock, frame(KIND_WORKERS, body, len(fds)), fds)
                except OSError:
                    self.drop(conn)
                finally:
                    # The client has them now (or is gone: they read EOF and exit).
                    for _, chan, pidfd in batch:
                        os.close(chan)
                        os.close(pidfd)
                if conn.sock.fileno() < 0:
                    break

    # -- clients
    def accept(self):
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid != self.uid:
            sock.close()
            return
        conn = _Conn(sock)
        try:
            send_frame(sock, KIND_CHALLENGE, conn.nonce)
        except OSError:
            sock.close()
            return
        sock.setblocking(False)
        self.conns[sock.fileno()] = conn
        self.sel.register(sock, selectors.EVENT_READ, conn)

    def drop(self, conn):
        if conn.sock.fileno() < 0:
            return
        self.sel.unregister(conn.sock)
        del self.conns[conn.sock.fileno()]
        conn.sock.close()

    def readable(self, conn):
        try:
            data, fds, _, _ = socket.recv_fds(conn.sock, 1 << 16, MAX_FDS)
        except BlockingIOError:
            return
        except OSError:
            self.drop(conn)
            return
        conn.frames.push(data, fds)
        if not data:
            self.drop(conn)
            return
        try:
            while True:
                got = conn.frames.next(conn.phase)
                if got is None:
                    return
                self.handle(conn, *got)
        except (ValueError, OSError):
            # A frame that breaks the rules, or a client gone mid-reply: close it.
            self.drop(conn)

    def handle(self, conn, kind, flags, id, body, fds):
        if conn.phase == "answer":
            welcome = _native.auth_check_answer(self.key, conn.nonce, body)
            conn.sock.setblocking(True)
            if welcome is None:
                try:
                    send_frame(conn.sock, KIND_FAILURE, b"authentication failed")
                finally:
                    raise ValueError("authentication failed")
            send_frame(conn.sock, KIND_WELCOME, welcome)
            conn.sock.setblocking(False)
            conn.phase = "request"
            return
        if kind == KIND_WANT:
            if len(body) != 4 or fds:
                raise ValueError("a Want is a u32 count and no fds")
            (n,) = struct.unpack("<I", body)
            conn.owed = min(MAX_OWED, conn.owed + n)
            return
        # A Fork request: hand it to an idle worker, answer with its pid and pidfd.
        try:
            while True:
                pid, chan_fd, pidfd = self.take_worker()
                chan = socket.socket(fileno=chan_fd)
                try:
                    send_job(chan, body, fds)
                    break
                except OSError:
                    # It died unused: the next one.
                    os.close(pidfd)
                finally:
                    chan.close()
        finally:
            for fd in fds:
                os.close(fd)
        conn.sock.setblocking(True)
        try:
            send_frame(conn.sock, KIND_SPAWNED, struct.pack("<I", pid), [pidfd], id=id)
        finally:
            os.close(pidfd)
            conn.sock.setblocking(False)

    def serve(self):
        self.listener.setblocking(False)
        self.template.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, "listener")
        self.sel.register(self.alive_fd, selectors.EVENT_READ, "alive")
        self.sel.register(self.template, selectors.EVENT_READ, "template")
        self.refill()
        while True:
            for key, _ in self.sel.select():
                if key.data == "listener":
                    self.accept()
                elif key.data == "alive":
                    return
                elif key.data == "template":
                    try:
                        self.worker_arrived()
                    except BlockingIOError:
                        pass
                elif isinstance(key.data, tuple):
                    self.worker_gone(key.data)
                else:
                    self.readable(key.data)
            # Workers owed to clients, and replacements for the workers handed out or gone,
            # off the request path.
            self.deliver()
            self.watch()
            self.refill()


def template_main(ctl):
    """The template: forks a worker per byte the zygote sends, hands it the worker's pid, the
    zygote's end of the worker's channel and a pidfd for the worker (opened here, by the
    parent, before the worker can have been reaped). It never has the key."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the workers
    # Everything the template holds now is what every worker starts from: out of the
    # collector's reach, a worker's collections never touch (and copy) those pages.
    global warm_payload
    try:
        warm_payload = warm_up(16)
    except Exception:
        pass  # only ever a head start
    gc.freeze()
    while True:
        try:
            asked = ctl.recv(64)
        except InterruptedError:
            continue
        except ConnectionResetError:
            asked = b""  # the zygote is gone (with workers' pids it had not read yet)
        if not asked:
            os._exit(0)
        # All asked for at once, then one message (fewer wake-ups of the zygote).
        made = fork_workers(ctl, len(asked))
        fds = []
        for _, ours, pidfd in made:
            fds += [ours.fileno(), pidfd]
        try:
            socket.send_fds(ctl, [struct.pack(f"<{len(made)}I", *(m[0] for m in made))], fds)
        except OSError:
            os._exit(0)  # the zygote is gone; the workers read EOF and exit
        for _, ours, pidfd in made:
            ours.close()
            os.close(pidfd)


def fork_workers(ctl, n):
    """Fork n workers (in the template): a (pid, our end of its channel, a pidfd for it) each.

    Every fork write-protects the template's pages, and each page the template then writes
    before its next fork is copied (a fault, ~2 us, here rather than in the worker): so the
    channels are made first and the forks follow in a tight loop that writes little. A worker
    closes the template's end of every channel and every pidfd it can see: it holds no other
    worker's channel or pidfd."""
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(n)]
    made = []
    fork, pidfd_open = os.fork, os.pidfd_open
    for ours, theirs in pairs:
        while True:
            pid = fork()
            if pid == 0:
                worker_start(ctl, pairs, theirs, made)  # never returns
            try:
                made.append((pid, ours, pidfd_open(pid)))
                break
            except OSError:
                pass  # it died already (and was reaped): another on the same channel
    for _, theirs in pairs:
        theirs.close()
    return made


def worker_start(ctl, pairs, chan, made):
    """In a worker just forked: close what is not its own, then be a worker."""
    ctl.close()
    for ours, theirs in pairs:
        ours.close()
        if theirs is not chan:
            theirs.close()
    for _, _, pidfd in made:
        os.close(pidfd)
    worker_main(chan)


def worker_main(chan):
    """A pooled worker: get ready while idle, wait for a job, then become the process in it."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        random.seed()  # this worker's own state (as the at-fork hook did), before the job
        if warm_payload:
            try:
                # While idle: the pages unpickling writes are copied now, not between
                # Process.start() and the process running.
                unpickle_dummy(warm_payload)
            except Exception:
                pass  # only ever a head start
        job = recv_job(chan)
        chan.close()
        if job is None:
            os._exit(0)  # the channel closed: not needed
        # An idle worker ignores a terminal's Ctrl-C as the zygote does; the process it
        # becomes does not.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        code = run_job(*job)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    os._exit(code)


def dummy_job():
    """A job's payload without a process to run: preparation data and a process object of
    the start method's class, never initialised (no name, no counter)."""
    from .multiprocessing import SpawnkitProcess

    dummy = SpawnkitProcess.__new__(SpawnkitProcess)
    dummy.__dict__.update(_name="", _args=(), _kwargs={})
    return (bytes(reduction.ForkingPickler.dumps({"name": "", "sys_path": [""]}))
            + bytes(reduction.ForkingPickler.dumps(dummy)))


def unpickle_dummy(payload):
    from_parent = io.BytesIO(payload)
    spawn.prepare({})
    reduction.pickle.load(from_parent)
    reduction.pickle.load(from_parent)


def warm_up(times):
    """In the template, before it forks: run a job's path up to the process's own code
    (receiving it with an fd, unpickling) on a dummy, often enough for the interpreter to
    have specialised that code here, once, rather than writing its counters (and copying
    their pages) in every worker. Returns the dummy's payload for the workers' own warm-up."""
    payload = dummy_job()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        for _ in range(times):
            send_job(a, payload, [a.fileno()])
            got = recv_job(b)
            assert got is not None
            for fd in got[1]:
                os.close(fd)
            unpickle_dummy(got[0])
    finally:
        a.close()
        b.close()
    return payload


def send_job(chan, payload, fds):
    """A job to a worker: the header with the fds beside it, then the payload (one sendmsg
    when it fits the socket's buffer). Raises OSError (EPIPE, ECONNRESET) if the worker is
    gone."""
    data = JOB_HEADER.pack(len(payload)) + payload
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
    sent = chan.sendmsg([data], anc, socket.MSG_NOSIGNAL)
    if sent < len(data):
        chan.sendall(memoryview(data)[sent:], socket.MSG_NOSIGNAL)


def recv_job(chan):
    """The payload and fds sent to this worker; None when the channel closes first."""
    data, fds, _, _ = socket.recv_fds(chan, 1 << 16, MAX_FDS)
    if not data:
        return None
    buf = bytearray(data)
    while len(buf) < JOB_HEADER.size:
        more = chan.recv(JOB_HEADER.size - len(buf))
        if not more:
            return None
        buf += more
    (n,) = JOB_HEADER.unpack_from(buf)
    n += JOB_HEADER.size
    while len(buf) < n:
        more = chan.recv(min(1 << 20, n - len(buf)))
        if not more:
            return None
        buf += more
    return memoryview(buf)[JOB_HEADER.size:], fds


def run_job(payload, fds):
    """Specialise: become the process in the payload (as multiprocessing.spawn's child). The
    payload's preparation data is what differs from what the zygote applied already."""
    global inherited_fds
    parent_sentinel, tracker_fd, *rest = fds
    inherited_fds = rest
    if tracker_fd >= 0:
        resource_tracker._resource_tracker._fd = tracker_fd
    from_parent = io.BytesIO(payload)
    process.current_process()._inheriting = True
    try:
        preparation_data = reduction.pickle.load(from_parent)
        if base_prep is not None:
            spawn.prepare(base_prep)
        spawn.prepare(preparation_data)
        self = reduction.pickle.load(from_parent)
    finally:
        del process.current_process()._inheriting
    return self._bootstrap(parent_sentinel)


def main():
    """The zygote's entry point (fds 3 to 6 as the module docstring says)."""
    me = os.getpid()
    peek = socket.socket(fileno=3)
    path = peek.getsockname()
    peek.detach()  # fd 3 stays open, for the listener
    try:
        _serve_from()
    finally:
        # However the zygote ends (its owner gone or stopped it, or a start that failed:
        # no key came because the owner was killed before it wrote one), its socket path
        # goes too: each path is its owner's alone (pid and random), and an owner that was
        # killed cannot remove it. Only the zygote: the template and the workers it forks
        # carry this frame too.
        if os.getpid() == me and isinstance(path, str) and path:
            try:
                os.unlink(path)
            except OSError:
                pass


def _serve_from():
    """The zygote: configure, preload, fork the template, read the key, serve."""
    with os.fdopen(4, "rb") as f:
        config = json.loads(f.read().decode())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the owner
    # What every worker needs, imported once here instead of once per process.
    import traceback  # noqa: F401

    from . import multiprocessing as _registers_the_start_method  # noqa: F401

    sys.path[:0] = [p for p in config.get("sys_path", []) if p not in sys.path]
    for name in config.get("preload", []):
        try:
            __import__(name)
        except ImportError:
            pass
    prep = config.get("prep")
    if prep:
        # The caller's preparation data (cwd, sys.path, sys.argv, the main module, which
        # multiprocessing's spawn imports as __mp_main__ ...), applied once here instead of
        # once per process; each job carries what differs from it.
        base = pickle.loads(bytes.fromhex(prep))
        # As a child of spawn or forkserver imports the main module: still bootstrapping, so
        # a script without the `if __name__ == "__main__":` guard that starts a process at
        # its top level fails here (multiprocessing's "bootstrapping phase" RuntimeError)
        # instead of running its program inside the zygote.
        process.current_process()._inheriting = True
        try:
            spawn.prepare(base)
        except Exception:
            # Each worker applies it again, failing (and reporting it) as spawn's child would.
            global base_prep
            base_prep = base
        finally:
            del process.current_process()._inheriting
    ctl, ctl_template = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.fork() == 0:
        # The template: before the key is read, without the listener or the alive pipe.
        ctl.close()
        for fd in (3, 5, 6):
            os.close(fd)
        template_main(ctl_template)
    ctl_template.close()
    key = bytearray(32)
    with os.fdopen(6, "rb", buffering=0) as f:
        view = memoryview(key)
        got = 0
        while got < 32:
            n = f.readinto(view[got:])
            if not n:
                raise SystemExit("spawnkit zygote: no key")
            got += n
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    listener = socket.socket(fileno=3)
    Zygote(listener, key, 5, ctl, int(config.get("pool_size", 2))).serve()
