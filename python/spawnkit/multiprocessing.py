"""The ``"spawnkit"`` start method for :mod:`multiprocessing`: fork's speed, forkserver's safety.

``import spawnkit.multiprocessing`` registers it, so ``multiprocessing.get_context("spawnkit")``,
``multiprocessing.set_start_method("spawnkit")`` and libraries that take a method name
(``concurrent.futures.ProcessPoolExecutor(mp_context=...)``) work unchanged;
:func:`get_context` returns the same context.

On first use the context starts a *zygote*: a clean, single-threaded Python process started
through spawnkit's engine (so starting it costs the same from a 20 GiB parent as from a small
one), which preloads the modules named by :func:`set_preload` and imports the caller's main
script once, as ``spawn`` would, then keeps a warm pool of pre-forked workers
(:func:`set_pool_size`). Over an authenticated Unix socket (the spawn server's frames and HMAC
handshake) the zygote hands this process idle workers ahead of need (a pid, a pidfd and the
worker's private channel each); ``Process.start()`` pops one and sends it the pickled process
and its fds: one message, no fork and no round trip. The stock is topped up off the request
path; a worker found dead is skipped; an empty stock falls back to asking the zygote (a round
trip). ``join``, ``exitcode``, ``sentinel`` (the pidfd), ``terminate`` and ``kill`` (through
the pidfd) work as with ``forkserver``.
Needs Linux 6.15+ (a pidfd's exit status after its parent, the zygote's template, reaped it).
"""

import collections
import io
import json
import os
import pickle
import socket
import stat
import struct
import sys
import threading
from multiprocessing import context as _context
from multiprocessing import popen_fork, process, reduction, resource_tracker, spawn, util

from . import _native
from ._zygote import (KIND_ERROR, KIND_FORK, KIND_SPAWNED, KIND_WANT, KIND_WORKERS, MAX_FDS,
                      send_frame, send_job)

__all__ = ["get_context", "set_preload", "set_pool_size", "SpawnkitContext", "Popen"]

METHOD = "spawnkit"


def _default_pool_size():
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


class _DupFd:
    """An fd passed to the worker with the process (multiprocessing's DupFd protocol)."""

    def __init__(self, ind):
        self.ind = ind

    def detach(self):
        from . import _zygote

        return _zygote.inherited_fds[self.ind]


class Popen(popen_fork.Popen):
    """The process's handle: a pidfd of the zygote's worker."""

    method = METHOD
    DupFd = _DupFd

    def __init__(self, process_obj):
        self._fds = []
        self._child = None
        super().__init__(process_obj)

    def duplicate_for_child(self, fd):
        self._fds.append(fd)
        return len(self._fds) - 1

    def _launch(self, process_obj):
        client = _zygote()
        # What differs from the preparation data the zygote applied once (at least the name
        # and the authkey, which the zygote never had).
        base = client.base_prep
        prep_data = {k: v for k, v in spawn.get_preparation_data(process_obj._name).items()
                     if k not in base or base[k] != v}
        buf = io.BytesIO()
        _context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            _context.set_spawning_popen(None)
        # The parent sentinel and the tracker's fd go with the process's own: one message
        # carries at most MAX_FDS (the kernel's SCM_MAX_FD). Refused before anything is sent
        # (as forkserver does), so no worker of the stock is spent on it.
        if len(self._fds) + 2 > MAX_FDS:
            raise ValueError("too many fds")
        parent_r, parent_w = os.pipe()
        tracker = _tracker_fd()
        fds = [parent_r, tracker if tracker is not None else parent_r, *self._fds]
        try:
            try:
                self._child = client.start(buf.getvalue(), fds)
            except _Stale:
                # The zygote was gone before the process was sent anywhere: a new one
                # starts it (as forkserver's ensure_running starts a new server).
                self._child = _zygote().start(buf.getvalue(), fds)
        except BaseException:
            os.close(parent_w)
            raise
        finally:
            os.close(parent_r)
        self.pid = self._child.pid
        self.sentinel = self._child.pidfd
        # The write end of the parent sentinel lives as long as this Popen (the child's
        # multiprocessing.parent_process() sees it close when we are gone).
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w,))

    def poll(self, flag=os.WNOHANG):
        if self.returncode is None and self._child is not None:
            rc = self._child.try_wait() if flag == os.WNOHANG else self._child.wait()
            if rc is not None:
                self.returncode = rc
        return self.returncode

    def _send_signal(self, sig):
        if self.returncode is None and self._child is not None:
            self._child.send_signal(sig)

    def close(self):
        super().close()
        self._child = None


class SpawnkitProcess(process.BaseProcess):
    _start_method = METHOD

    @staticmethod
    def _Popen(process_obj):
        return Popen(process_obj)


class SpawnkitContext(_context.BaseContext):
    _name = METHOD
    Process = SpawnkitProcess

    def _check_available(self):
        if not reduction.HAVE_SEND_HANDLE:
            raise ValueError("the spawnkit start method needs fd passing (SCM_RIGHTS)")

    def set_preload(self, module_names):
        set_preload(module_names)

    def set_pool_size(self, n):
        set_pool_size(n)


_ctx = SpawnkitContext()
_context._concrete_contexts[METHOD] = _ctx
_preload = []
_pool_size = None


def get_context():
    """The ``"spawnkit"`` context (as ``multiprocessing.get_context("spawnkit")``)."""
    return _ctx


def set_preload(module_names):
    """Modules the zygote imports before it forks its workers (as
    ``multiprocessing.set_forkserver_preload``); takes effect when the zygote starts."""
    global _preload
    if not all(type(m) is str for m in module_names):
        raise TypeError("module_names must be a list of strings")
    _preload = list(module_names)


def set_pool_size(n):
    """How many pre-forked workers the zygote keeps ready, and this process keeps in stock
    (default: twice the CPUs, 2 to 8); takes effect when the zygote starts."""
    global _pool_size
    n = int(n)
    if n < 1:
        raise ValueError("the pool size is at least 1")
    _pool_size = n


class _Client:
    """This process's zygote: started on first use, connected over an authenticated socket."""

    def __init__(self):
        self.lock = threading.Lock()
        self.owner = os.getpid()
        self.broken = False  # the connection failed: replaced on the next start
        # Before anything is made: a process still importing its main module (a script
        # without the main guard, imported again by a zygote or a worker) gets
        # multiprocessing's bootstrapping RuntimeError here.
        prep = spawn.get_preparation_data("zygote")
        prep.pop("authkey", None)  # each process gets its own in its job
        # The zygote applies it once; each job carries what differs.
        self.base_prep = prep
        self.stock_size = _pool_size or _default_pool_size()
        self.key = os.urandom(32)
        self.proc = None
        self.sock = None
        self.alive_w = -1
        self.frames = _native.Frames()
        self.next_id = 1
        # Idle workers handed over by the zygote: (pid, pidfd, channel socket), oldest first.
        self.stock = collections.deque()
        self.wanted = 0  # workers asked for (Want) and not arrived yet
        d = _socket_dir()
        self.path = os.path.join(d, f"zygote-{os.getpid()}-{os.urandom(6).hex()}.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.path)
            try:
                listener.listen(64)
                self._start_zygote(listener, prep)
            finally:
                listener.close()
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(self.path)
            self._handshake()
        except BaseException:
            # Nothing of a zygote half made outlives the error: its process, the pipe that
            # keeps it alive, the connection, the socket path.
            _Client._stop(self.sock, self.alive_w, self.proc, self.path, self.stock)
            raise
        self.stop = util.Finalize(self, _Client._stop,
                                  (self.sock, self.alive_w, self.proc, self.path, self.stock),
                                  exitpriority=-100)
        self._top_up()

    def _start_zygote(self, listener, prep):
        """Start the zygote on `listener` (bound and listening), write its configuration and
        key to it, keep the write end of its alive pipe (`alive_w`)."""
        from . import Command

        config = {"preload": _preload, "pool_size": self.stock_size,
                  "sys_path": [p for p in sys.path if p], "prep": pickle.dumps(prep).hex()}
        fds = []  # every pipe end this opened and not yet closed
        try:
            for _ in range(3):
                fds.extend(os.pipe())
            conf_r, conf_w, key_r, key_w, alive_r, alive_w = fds
            cmd = (Command(sys.executable)
                   .args(["-c", "from spawnkit._zygote import main; main()"])
                   .fd(3, listener.fileno()).fd(4, conf_r).fd(5, alive_r).fd(6, key_r))
            self.proc = cmd.spawn()
            fds.remove(alive_w)
            self.alive_w = alive_w  # closed by _stop from now on
            for fd in (conf_r, key_r, alive_r):
                fds.remove(fd)
                os.close(fd)
            # The zygote reads its configuration to EOF, then the key.
            for fd, data in ((conf_w, json.dumps(config).encode()), (key_w, self.key)):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                fds.remove(fd)
                os.close(fd)
        finally:
            for fd in fds:
                os.close(fd)

    @staticmethod
    def _stop(sock, alive_w, proc, path, stock):
        """Close the connection, the stock and the alive pipe: the zygote exits (its workers
        follow when their channels close); running processes keep running."""
        _close_stock(stock)
        if sock is not None:
            sock.close()
        if alive_w >= 0:
            try:
                os.close(alive_w)
            except OSError:
                pass
        if proc is not None:
            try:
                proc.wait(5)
            except Exception:
                try:
                    proc.kill()
                    proc.wait(5)
                except Exception:
                    pass
        try:
            os.unlink(path)
        except OSError:
            pass

    def _recv_frame(self, phase, block=True):
        """The next frame allowed in `phase`; with block=False, None if none has arrived."""
        while True:
            got = self.frames.next(phase)
            if got is not None:
                return got
            try:
                data, anc, _, _ = self.sock.recvmsg(
                    1 << 16, _ANC_SPACE,
                    socket.MSG_CMSG_CLOEXEC | (0 if block else socket.MSG_DONTWAIT))
            except BlockingIOError:
                return None
            fds = []
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    fds += struct.unpack(f"{len(cdata) // 4}i", cdata[: len(cdata) // 4 * 4])
            self.frames.push(data, fds)
            if not data:
                raise ConnectionError("the spawnkit zygote closed the connection")

    def _reply(self, block=True):
        """The next Spawned or Error frame; Workers frames that come first go to the stock.
        With block=False, None once nothing more has arrived."""
        while True:
            got = self._recv_frame("reply", block)
            if got is None or got[0] != KIND_WORKERS:
                return got
            _, _, _, body, fds = got
            n = len(body) // 4
            if len(body) != 4 * n or len(fds) != 2 * n:
                for fd in fds:
                    os.close(fd)
                raise ConnectionError("a malformed Workers frame from the zygote")
            for i, pid in enumerate(struct.unpack(f"<{n}I", body)):
                self.stock.append((pid, fds[2 * i], socket.socket(fileno=fds[2 * i + 1])))
            self.wanted = max(0, self.wanted - n)

    def _top_up(self):
        """Ask for workers (without waiting) once the stock and what is on its way fall to
        half the stock's size."""
        have = len(self.stock) + self.wanted
        if have <= self.stock_size // 2:
            n = self.stock_size - have
            send_frame(self.sock, KIND_WANT, struct.pack("<I", n))
            self.wanted += n

    def forget(self):
        """In a forked child: close this process's copies of the stock and the connection
        (the parent's stay its own); the child starts a zygote of its own if it needs one."""
        _close_stock(self.stock)
        self.sock.close()
        alive_w, self.alive_w = self.alive_w, -1
        if alive_w >= 0:
            os.close(alive_w)

    def _handshake(self):
        _, _, _, ns, _ = self._recv_frame("challenge")
        answer, nc = _native.auth_answer(self.key, ns)
        send_frame(self.sock, 2, answer)
        kind, _, _, welcome, _ = self._recv_frame("welcome")
        if kind != 3 or not _native.auth_check_welcome(self.key, ns, nc, welcome):
            raise ConnectionError("the spawnkit zygote did not prove the key")

    def alive(self):
        """Whether the zygote still serves: its process runs and its connection has not
        failed."""
        return not self.broken and self.proc.poll() is None

    def start(self, payload, fds):
        if len(fds) > MAX_FDS:
            raise ValueError("too many fds")
        with self.lock:
            try:
                return self._start(payload, fds)
            except ConnectionError:
                # The connection is gone or out of step: the next start uses a new zygote.
                self.broken = True
                raise

    def _start(self, payload, fds):
        if self.wanted:
            try:
                got = self._reply(block=False)  # take in the Workers frames that arrived
            except OSError as e:
                # The zygote closed the connection before this process was sent anywhere.
                raise _Stale(str(e)) from e
            if got is not None:
                for fd in got[4]:
                    os.close(fd)
                raise ConnectionError("an answer from the zygote to no request")
        while self.stock:
            pid, pidfd, chan = self.stock.popleft()
            try:
                send_job(chan, payload, fds)
            except OSError:
                os.close(pidfd)  # it died unused: the next one
                continue
            finally:
                chan.close()
            child = _native.remote_child(pid, pidfd)
            try:
                self._top_up()
            except OSError:
                # The process is started; the next start uses a new zygote.
                self.broken = True
            return child
        # The stock ran dry: the zygote hands the job to a worker of its own pool.
        try:
            self._top_up()
            id = self.next_id
            self.next_id += 1
            # A send that fails delivered no whole frame: the zygote never had the job.
            send_frame(self.sock, KIND_FORK, payload, fds, id=id)
        except OSError as e:
            raise _Stale(str(e)) from e
        kind, _, rid, body, got = self._reply()
        if rid != id:
            for fd in got:
                os.close(fd)
            raise ConnectionError(f"the zygote answered request {rid}, not {id}")
        if kind == KIND_ERROR:
            for fd in got:
                os.close(fd)
            raise OSError(body.decode(errors="replace"))
        assert kind == KIND_SPAWNED and len(got) == 1
        (pid,) = struct.unpack("<I", body)
        return _native.remote_child(pid, got[0])


class _Stale(ConnectionError):
    """The zygote's connection failed before a process was sent to it or to a worker: the
    start can be made again through a new zygote."""


_ANC_SPACE = socket.CMSG_SPACE(MAX_FDS * 4)


def _tracker_fd():
    """The resource tracker's fd for a new process: started the first time (as spawn and
    forkserver do), then passed as it is, without resource_tracker.getfd()'s probe (a write
    the tracker wakes up to read) per process: a process that finds it dead when it first
    registers something starts another, as a child of spawn's would."""
    fd = resource_tracker._resource_tracker._fd
    if fd is not None:
        return fd
    try:
        return resource_tracker.getfd()
    except Exception:
        return None


def _close_stock(stock):
    while stock:
        _, pidfd, chan = stock.popleft()
        chan.close()
        try:
            os.close(pidfd)
        except OSError:
            pass


_client = None
_client_lock = threading.Lock()


def _after_fork_in_child():
    """A forked child never uses its parent's zygote, connection or stock."""
    global _client, _client_lock
    _client_lock = threading.Lock()  # another thread may have held it at the fork
    if _client is not None and _client.owner != os.getpid():
        client, _client = _client, None
        client.forget()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _shutdown():
    """Stop this process's zygote now (the next use starts a new one)."""
    global _client
    with _client_lock:
        client, _client = _client, None
    if client is not None and client.owner == os.getpid():
        client.stop()


def _zygote():
    """This process's zygote: started on first use, and again if the last one died or its
    connection failed (as forkserver's ensure_running starts a new server)."""
    global _client
    with _client_lock:
        old = _client
        if old is None or old.owner != os.getpid():
            _client = _Client()
        elif not old.alive():
            _client = None
            old.stop()  # its stock (the idle workers exit), connection and socket path
            _client = _Client()
        return _client


def _socket_dir():
    base = os.environ.get("XDG_RUNTIME_DIR")
    d = os.path.join(base, "spawnkit") if base else f"/tmp/spawnkit-{os.getuid()}"
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)  # the directory itself: a symlink named so is refused
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError(f"{d} is not private to this user (owner {st.st_uid}, mode "
                              f"{st.st_mode & 0o777:o})")
    return d
