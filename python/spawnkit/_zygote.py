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
  server (docs/protocol.md); then ``Fork`` frames, each a pickled process and its fds;
* the request goes to an idle pooled worker over its private socketpair; the reply is the
  worker's pid and a pidfd for it (SCM_RIGHTS); the template forks a replacement after it;
* workers are children of the template, reaped by the kernel (SIGCHLD ignored there), so a
  client's pidfd reports the exit status (PIDFD_INFO_EXIT, Linux 6.15+).

A worker waits on its channel; when its job arrives it resets SIGCHLD, reseeds ``random``, and
runs the process as multiprocessing's ``spawn`` child would.
"""

import json
import os
import pickle
import selectors
import signal
import socket
import struct
import sys

from . import _native

KIND_CHALLENGE, KIND_ANSWER, KIND_WELCOME, KIND_FAILURE = 1, 2, 3, 4
KIND_SPAWNED, KIND_ERROR, KIND_FORK = 17, 18, 32
MAX_FDS = 253

# The fds a worker received with its job (multiprocessing's DupFd.detach reads them).
inherited_fds = []


def frame(kind, body=b"", nfds=0, id=0):
    return _native.frame_header(kind, nfds, id, len(body)) + body


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


class Zygote:
    def __init__(self, listener, key, alive_fd, template, pool_size):
        self.listener = listener
        self.key = key
        self.alive_fd = alive_fd
        self.template = template  # control socket to the template
        self.pool_size = pool_size
        self.sel = selectors.DefaultSelector()
        self.conns = {}
        self.idle = []  # [(pid, channel socket)]
        self.asked = 0  # workers asked of the template, not arrived yet
        self.uid = os.geteuid()  # SO_PEERCRED reports the peer's effective uid

    # -- the pool (forked by the template)
    def refill(self):
        want = self.pool_size - len(self.idle) - self.asked
        if want > 0:
            self.template.sendall(b"F" * want)
            self.asked += want

    def worker_arrived(self):
        data, fds, _, _ = socket.recv_fds(self.template, 4 * 64, 64)
        if not data:
            raise SystemExit(1)  # the template is gone
        pids = struct.unpack(f"<{len(data) // 4}I", data[: len(data) // 4 * 4])
        for pid, fd in zip(pids, fds):
            chan = socket.socket(fileno=fd)
            # A worker never writes to its channel: readable means it died unused (EOF).
            self.sel.register(chan, selectors.EVENT_READ, (pid, chan))
            self.idle.append((pid, chan))
        self.asked -= len(pids)

    def take_worker(self):
        while not self.idle:
            if self.asked == 0:
                self.template.sendall(b"F")
                self.asked += 1
            self.template.setblocking(True)
            self.worker_arrived()
            self.template.setblocking(False)
        pid, chan = self.idle.pop(0)
        self.sel.unregister(chan)
        return pid, chan

    def worker_gone(self, worker):
        """An idle worker's channel read EOF: it died unused; refill replaces it."""
        if worker in self.idle:
            self.idle.remove(worker)
            self.sel.unregister(worker[1])
            worker[1].close()

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
        # A Fork request: hand it to an idle worker, answer with its pid and pidfd.
        pidfd = None
        try:
            while True:
                pid, chan = self.take_worker()
                try:
                    pidfd = os.pidfd_open(pid)
                    send_job(chan, body, fds)
                    break
                except OSError:
                    # It died unused: the next one.
                    if pidfd is not None:
                        os.close(pidfd)
                        pidfd = None
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
            # Replacements for the workers handed out or gone, asked for here, off the
            # request path.
            self.refill()


def template_main(ctl):
    """The template: forks a worker per byte the zygote sends, hands it the worker's pid and
    the zygote's end of the worker's channel. It never has the key."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the workers
    while True:
        try:
            asked = ctl.recv(64)
        except InterruptedError:
            continue
        except ConnectionResetError:
            asked = b""  # the zygote is gone (with workers' pids it had not read yet)
        if not asked:
            os._exit(0)
        for _ in asked:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            pid = os.fork()
            if pid == 0:
                ctl.close()
                ours.close()
                worker_main(theirs)  # never returns
            theirs.close()
            try:
                socket.send_fds(ctl, [struct.pack("<I", pid)], [ours.fileno()])
            except OSError:
                os._exit(0)  # the zygote is gone; the worker reads EOF and exits
            ours.close()


def worker_main(chan):
    """A pooled worker: wait for a job, then become the process in it."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        job = recv_job(chan)
        chan.close()
        if job is None:
            os._exit(0)  # the zygote closed the channel: not needed
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


def send_job(chan, payload, fds):
    header = struct.pack("<Q", len(payload))
    if fds:
        socket.send_fds(chan, [header], list(fds))
    else:
        chan.sendall(header)
    chan.sendall(payload)


def recv_job(chan):
    """The payload and fds the zygote hands this worker; None when it closes the channel."""
    data, fds, _, _ = socket.recv_fds(chan, 8, MAX_FDS)
    if not data:
        return None
    while len(data) < 8:
        more = chan.recv(8 - len(data))
        if not more:
            return None
        data += more
    (n,) = struct.unpack("<Q", data)
    buf = bytearray()
    while len(buf) < n:
        more = chan.recv(min(1 << 20, n - len(buf)))
        if not more:
            return None
        buf += more
    return bytes(buf), fds


def run_job(payload, fds):
    """Specialise: become the process in the payload (as multiprocessing.spawn's child)."""
    import io
    import random

    from multiprocessing import process, resource_tracker, spawn
    from multiprocessing import reduction

    from . import multiprocessing as _registers_the_start_method  # noqa: F401

    random.seed()
    global inherited_fds
    parent_sentinel, tracker_fd, *rest = fds
    inherited_fds = rest
    if tracker_fd >= 0:
        resource_tracker._resource_tracker._fd = tracker_fd
    from_parent = io.BytesIO(payload)
    process.current_process()._inheriting = True
    try:
        preparation_data = reduction.pickle.load(from_parent)
        spawn.prepare(preparation_data)
        self = reduction.pickle.load(from_parent)
    finally:
        del process.current_process()._inheriting
    return self._bootstrap(parent_sentinel)


def main():
    """The zygote's entry point (fds 3 to 6 as the module docstring says)."""
    with os.fdopen(4, "rb") as f:
        config = json.loads(f.read().decode())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the owner
    # What every worker needs, imported once here instead of once per process.
    import io  # noqa: F401
    import random  # noqa: F401
    import traceback  # noqa: F401
    from multiprocessing import process, reduction, resource_tracker, spawn  # noqa: F401

    from . import multiprocessing as _registers_the_start_method  # noqa: F401

    sys.path[:0] = [p for p in config.get("sys_path", []) if p not in sys.path]
    for name in config.get("preload", []):
        try:
            __import__(name)
        except ImportError:
            pass
    prep = config.get("main")
    if prep:
        # The caller's __main__ as multiprocessing's spawn imports it (as __mp_main__), once
        # here instead of once per process.
        try:
            from multiprocessing import spawn

            spawn.prepare(pickle.loads(bytes.fromhex(prep)))
        except Exception:
            pass
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
