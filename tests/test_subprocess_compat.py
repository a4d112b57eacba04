"""spawnkit.subprocess agrees with the standard subprocess module.

Every test runs one behaviour against both modules (`agree`) and asserts they give the same
output, return code, or exception (class and attributes), as seen by the caller and from
inside the child."""

import errno
import io
import os
import pathlib
import signal
import stat
import subprocess as std
import sys
import tempfile
import threading
import time
import warnings

import pytest

from conftest import agree, is_root, py
from spawnkit import subprocess as sk


# ---------------------------------------------------------------- module surface

def test_same_public_names():
    for name in std.__all__:
        assert hasattr(sk, name), name
    for name in ("list2cmdline", "PIPE", "STDOUT", "DEVNULL", "SubprocessError",
                 "CalledProcessError", "TimeoutExpired", "CompletedProcess"):
        assert getattr(sk, name) is getattr(std, name), name


def test_popen_is_a_standard_popen():
    with sk.Popen(["true"]) as p:
        assert isinstance(p, std.Popen)
    assert sk.Popen[bytes] is not None


def test_private_names_fall_back_to_the_standard_module():
    assert sk._args_from_interpreter_flags is std._args_from_interpreter_flags
    with pytest.raises(AttributeError):
        sk.no_such_name  # noqa: B018


def test_list2cmdline():
    assert sk.list2cmdline(["a b", 'c"d', ""]) == std.list2cmdline(["a b", 'c"d', ""])


# ---------------------------------------------------------------- outputs, return codes

def test_run_capture_output():
    agree(lambda m: m.run(["sh", "-c", "echo out; echo err >&2; exit 3"], capture_output=True))


def test_run_returns_completed_process(sp):
    r = sp.run(["sh", "-c", "echo hi"], stdout=sp.PIPE)
    assert isinstance(r, std.CompletedProcess)
    assert (r.args, r.returncode, r.stdout, r.stderr) == (["sh", "-c", "echo hi"], 0, b"hi\n", None)


def completed(r):
    return (r.args, r.returncode, r.stdout, r.stderr)


def test_run_check_raises_called_process_error():
    agree(lambda m: m.run(["sh", "-c", "echo o; echo e >&2; exit 7"],
                          capture_output=True, check=True))


def test_returncodes():
    for code in (0, 1, 2, 127, 255):
        assert agree(lambda m: m.call(["sh", "-c", f"exit {code}"])) == ("ok", code)


def test_killed_by_signal_is_negative():
    assert agree(lambda m: m.call(["sh", "-c", "kill -USR1 $$"])) == ("ok", -signal.SIGUSR1)


def test_call_check_call_check_output():
    agree(lambda m: m.call(["true"]))
    agree(lambda m: m.check_call(["false"]))
    agree(lambda m: m.check_call(["true"]))
    agree(lambda m: m.check_output(["echo", "hello"]))
    agree(lambda m: m.check_output(["sh", "-c", "echo x; exit 4"]))
    agree(lambda m: m.check_output(["cat"], input=b"fed in"))
    agree(lambda m: m.check_output(["cat"], input=None, text=True))
    agree(lambda m: m.check_output(["sh", "-c", "echo err >&2"], stderr=m.STDOUT))


def test_check_output_refuses_stdout(sp):
    with pytest.raises(ValueError, match="stdout argument not allowed"):
        sp.check_output(["true"], stdout=sp.PIPE)


def test_getoutput_getstatusoutput():
    agree(lambda m: m.getoutput("echo one; echo two"))
    agree(lambda m: m.getstatusoutput("echo out; echo err >&2; exit 5"))
    agree(lambda m: m.getstatusoutput("kill $$"))
    agree(lambda m: m.getstatusoutput("/nonexistent/command"))


def test_args_forms():
    agree(lambda m: m.check_output("echo"))  # a str without shell is the program
    agree(lambda m: m.check_output([b"echo", b"bytes", "str"]))
    agree(lambda m: m.check_output(pathlib.Path("/bin/echo")))
    agree(lambda m: m.check_output(["echo", pathlib.Path("/a/path")]))
    agree(lambda m: m.check_output(("echo", "tuple")))
    agree(lambda m: m.check_output(iter(["echo", "iterator"])))


def test_bad_args():
    agree(lambda m: m.run(["echo", "nul\0byte"]))
    agree(lambda m: m.run(["echo", 3]))
    agree(lambda m: m.run([]))
    agree(lambda m: m.run(pathlib.Path("/bin/echo"), shell=True))
    agree(lambda m: m.run(["true"], startupinfo=1))
    agree(lambda m: m.run(["true"], text=True, universal_newlines=False))
    agree(lambda m: m.run(["true"], bufsize="1"))


def test_executable_replaces_the_program_not_argv0():
    agree(lambda m: m.check_output(["my-name", "-c", 'echo "$0"'], executable="/bin/sh"))
    agree(lambda m: m.check_output(["my-name", "-c", 'echo "$0"'], executable="sh"))
    agree(lambda m: m.check_output(["my-name", "-c", 'echo "$0"'],
                                   executable=pathlib.Path("/bin/sh")))


def test_shell():
    agree(lambda m: m.run("echo $0; echo a | tr a b; exit 3", shell=True, capture_output=True))
    agree(lambda m: m.run(["echo $0 $1", "x", "y"], shell=True, capture_output=True))
    agree(lambda m: m.run("echo $0", shell=True, executable="/bin/bash", capture_output=True))
    agree(lambda m: m.run(b"echo bytes", shell=True, capture_output=True))


# ---------------------------------------------------------------- exec errors

def test_missing_program_raises_file_not_found():
    kind, e = agree(lambda m: m.run(["spawnkit-no-such-program"]))
    assert kind == "raised" and e["type"] is FileNotFoundError
    assert e["filename"] == "spawnkit-no-such-program" and e["errno"] == errno.ENOENT


def test_missing_program_forms():
    agree(lambda m: m.run(["/nonexistent/dir/prog"]))
    agree(lambda m: m.run([b"spawnkit-no-such-program"]))
    agree(lambda m: m.run([pathlib.Path("spawnkit-no-such-program")]))
    agree(lambda m: m.run(["true"], executable="spawnkit-no-such-program"))
    agree(lambda m: m.run("spawnkit-no-such-program --flag"))  # str: the whole is the name
    agree(lambda m: m.run(["/etc/passwd/child"]))  # ENOTDIR


def test_not_executable_and_not_a_program(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("echo hi\n")
    noexec = tmp_path / "noshebang"
    noexec.write_bytes(b"\x00\x01\x02garbage")
    noexec.chmod(0o755)
    kind, e = agree(lambda m: m.run([str(plain)]))
    assert e["type"] is PermissionError
    agree(lambda m: m.run([str(tmp_path)]))  # a directory: EACCES
    kind, e = agree(lambda m: m.run([str(noexec)]))
    assert e["errno"] == errno.ENOEXEC


def test_path_search_uses_the_childs_path(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    tool = d / "spawnkit-tool"
    tool.write_text("#!/bin/sh\necho found me\n")
    tool.chmod(0o755)
    env = {"PATH": f"/nonexistent:{d}"}
    assert agree(lambda m: m.check_output(["spawnkit-tool"], env=env))[1] == b"found me\n"
    agree(lambda m: m.run(["spawnkit-tool"]))  # not in the parent's PATH
    agree(lambda m: m.run(["spawnkit-tool"], env={}))  # default PATH /bin:/usr/bin


def test_path_search_skips_a_directory_and_a_non_executable(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    (a / "spawnkit-tool").mkdir()  # EACCES
    (b / "spawnkit-tool").write_text("#!/bin/sh\necho no\n")  # not executable: EACCES
    good = c / "spawnkit-tool"
    good.write_text("#!/bin/sh\necho yes\n")
    good.chmod(0o755)
    env = {"PATH": f"{a}:{b}:{c}"}
    assert agree(lambda m: m.check_output(["spawnkit-tool"], env=env)) == ("ok", b"yes\n")
    env = {"PATH": f"{a}:{b}"}
    kind, e = agree(lambda m: m.run(["spawnkit-tool"], env=env))
    assert e["type"] is PermissionError


def test_path_search_tries_every_entry(tmp_path):
    # CPython tries every PATH entry: a first candidate that is executable but no program
    # (ENOEXEC) does not hide a working one further on; the first error that is not
    # ENOENT/ENOTDIR is the one reported when none works.
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    garbage = a / "spawnkit-tool"
    garbage.write_bytes(b"\x00\x01\x02 not a program")
    garbage.chmod(0o755)
    good = b / "spawnkit-tool"
    good.write_text("#!/bin/sh\necho second\n")
    good.chmod(0o755)
    (c / "spawnkit-tool").write_text("#!/bin/sh\necho no\n")  # not executable: EACCES
    env = {"PATH": f"{a}:{b}"}
    assert agree(lambda m: m.check_output(["spawnkit-tool"], env=env)) == ("ok", b"second\n")
    assert agree(lambda m: m.check_output("spawnkit-tool", env=env)) == ("ok", b"second\n")
    kind, e = agree(lambda m: m.run(["spawnkit-tool"], env={"PATH": f"/nonexistent:{a}:{c}"}))
    assert e["type"] is OSError and e["errno"] == errno.ENOEXEC  # the first, not EACCES
    kind, e = agree(lambda m: m.run(["spawnkit-tool"], env={"PATH": f"{c}:{a}"}))
    assert e["type"] is PermissionError


def test_relative_program_resolves_from_cwd(tmp_path):
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\npwd\n")
    tool.chmod(0o755)
    agree(lambda m: m.check_output(["./tool.sh"], cwd=tmp_path))


# ---------------------------------------------------------------- cwd

def test_cwd_forms(tmp_path):
    for cwd in (str(tmp_path), os.fsencode(tmp_path), tmp_path):
        assert agree(lambda m: m.check_output(["pwd"], cwd=cwd))[1] == os.fsencode(tmp_path) + b"\n"


def test_bad_cwd_raises_for_the_cwd(tmp_path):
    for cwd in ("/nonexistent-dir", b"/nonexistent-dir", pathlib.Path("/nonexistent-dir")):
        kind, e = agree(lambda m: m.run(["true"], cwd=cwd))
        assert e["type"] is FileNotFoundError and e["filename"] == cwd
    f = tmp_path / "file"
    f.write_text("")
    kind, e = agree(lambda m: m.run(["true"], cwd=str(f)))
    assert e["type"] is NotADirectoryError
    agree(lambda m: m.run(["true"], cwd="bad\0cwd"))
    agree(lambda m: m.run(["true"], cwd=42))


def test_bad_cwd_and_missing_program_reports_the_cwd():
    agree(lambda m: m.run(["spawnkit-no-such-program"], cwd="/nonexistent-dir"))


# ---------------------------------------------------------------- environment

ENV_DUMP = "import os; print(sorted((k, v) for k, v in os.environb.items() if k != b'LC_CTYPE'))"


def test_env_replaces_the_environment():
    agree(lambda m: m.check_output(py(ENV_DUMP), env={}))
    agree(lambda m: m.check_output(py(ENV_DUMP), env={"A": "1", b"B": b"2", "C": "\xe9"}))
    agree(lambda m: m.check_output(py(ENV_DUMP), env={"P": pathlib.Path("/x")}))


def test_env_keeps_the_dict_order():
    # The child's environment is in the dict's order, as CPython passes it.
    names = "import os; print([k for k in os.environ if k != 'LC_CTYPE'])"
    env = {"B": "1", "A": "2", "C": "3", b"0": b"4"}
    assert agree(lambda m: m.check_output(py(names), env=env)) == \
        ("ok", b"['B', 'A', 'C', '0']\n")
    assert agree(lambda m: m.check_output(["env"], env=env)) == ("ok", b"B=1\nA=2\nC=3\n0=4\n")
    # A copy of os.environ with a value changed and a name added: the same order.
    env = dict(os.environ, PATH=os.environ.get("PATH", "/usr/bin:/bin"), SPAWNKIT_NEW="x")
    agree(lambda m: m.check_output(["env"], env=env))


def test_env_inherited(monkeypatch):
    monkeypatch.setenv("SPAWNKIT_TEST_VAR", "inherited")
    agree(lambda m: m.check_output(py(ENV_DUMP)))


def test_bad_env():
    agree(lambda m: m.run(["true"], env={"A=B": "x"}))
    agree(lambda m: m.run(["true"], env={"A": "x\0y"}))
    agree(lambda m: m.run(["true"], env={"A": 1}))
    agree(lambda m: m.run(["true"], env={"A\0": "x"}))


# ---------------------------------------------------------------- text modes

def test_text_modes():
    data = "line1\r\nline2\rline3\nend"
    cmd = ["printf", "%s", data]
    agree(lambda m: m.run(cmd, capture_output=True))
    agree(lambda m: m.run(cmd, capture_output=True, text=True))
    agree(lambda m: m.run(cmd, capture_output=True, universal_newlines=True))
    agree(lambda m: m.run(cmd, capture_output=True, encoding="utf-8"))
    agree(lambda m: m.run(cmd, capture_output=True, errors="strict"))


def test_encodings_and_errors():
    raw = ["printf", r"caf\351 \377\n"]
    agree(lambda m: m.run(raw, capture_output=True, encoding="latin-1"))
    agree(lambda m: m.run(raw, capture_output=True, encoding="utf-8", errors="replace"))
    agree(lambda m: m.run(raw, capture_output=True, encoding="utf-8", errors="surrogateescape"))
    agree(lambda m: m.run(raw, capture_output=True, encoding="utf-8"))  # UnicodeDecodeError
    agree(lambda m: m.run(["cat"], input="h\xe9llo\n", capture_output=True, encoding="utf-16"))


def test_text_input_and_stream_types():
    def streams(m):
        with m.Popen(["cat"], stdin=m.PIPE, stdout=m.PIPE, stderr=m.PIPE, text=True) as p:
            kinds = [type(s).__name__ for s in (p.stdin, p.stdout, p.stderr)]
            out = p.communicate("text in\r\nmore")
            return kinds, out, p.returncode, p.text_mode, p.universal_newlines, p.encoding
    agree(streams)


def test_bufsize():
    def kinds(m, **kw):
        with m.Popen(["cat"], stdin=m.PIPE, stdout=m.PIPE, **kw) as p:
            r = (type(p.stdin).__name__, type(p.stdout).__name__,
                 getattr(p.stdin, "line_buffering", None))
            p.communicate()
            return r
    for kw in ({}, {"bufsize": 0}, {"bufsize": -1}, {"bufsize": 1}, {"bufsize": 4096},
               {"bufsize": None}, {"bufsize": 1, "text": True}, {"bufsize": 0, "text": True}):
        agree(lambda m: kinds(m, **kw))


def test_line_buffered_text_conversation():
    def talk(m):
        code = "import sys\nfor line in sys.stdin:\n    print(line.upper(), end='', flush=True)"
        with m.Popen(py(code), stdin=m.PIPE, stdout=m.PIPE, text=True, bufsize=1) as p:
            got = []
            for word in ("one", "two", "three"):
                p.stdin.write(word + "\n")  # line buffering flushes it
                got.append(p.stdout.readline())
            p.stdin.close()
            return got, p.wait()
    agree(talk)


# ---------------------------------------------------------------- standard streams

def test_stdio_targets(tmp_path):
    def files(m):
        out = tmp_path / f"out-{m.__name__}"
        with open(out, "wb") as f:
            r = m.run(["sh", "-c", "echo to-out; echo to-err >&2"], stdout=f, stderr=m.STDOUT)
        return r.returncode, out.read_bytes()
    agree(files)

    def fds(m):
        r, w = os.pipe()
        try:
            m.run(["sh", "-c", "echo via-fd"], stdout=w)
            os.close(w)
            return os.read(r, 100)
        finally:
            os.close(r)
    agree(fds)
    agree(lambda m: m.run(["sh", "-c", "echo o; echo e >&2"], stdout=m.DEVNULL, stderr=m.PIPE))
    agree(lambda m: m.run(["cat"], stdin=m.DEVNULL, capture_output=True))
    agree(lambda m: m.run(["sh", "-c", "echo o; echo e >&2"], stdout=m.PIPE, stderr=m.STDOUT))


def test_stdin_from_file(tmp_path):
    src = tmp_path / "in"
    src.write_bytes(b"from a file\n")

    def run(m):
        with open(src, "rb") as f:
            return m.run(["cat"], stdin=f, capture_output=True)
    agree(run)


def test_swapped_stdout_stderr():
    def swap(m):
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        try:
            m.run(["sh", "-c", "echo one; echo two >&2"], stdout=w2, stderr=w1)
            os.close(w1)
            os.close(w2)
            return os.read(r1, 100), os.read(r2, 100)
        finally:
            os.close(r1)
            os.close(r2)
    assert agree(swap) == ("ok", (b"two\n", b"one\n"))


def test_stdio_on_low_fds():
    """A pipe end that landed on fd 0, 1 or 2 of the parent still ends up right."""
    def low(m):
        saved = os.dup(0)
        try:
            os.close(0)
            r = m.run(["sh", "-c", "echo ok; cat"], input=b"data", capture_output=True)
            return r.stdout, r.returncode
        finally:
            os.dup2(saved, 0)
            os.close(saved)
    agree(low)


# ---------------------------------------------------------------- fd inheritance

FD_DUMP = "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))"


def test_fd_inheritance():
    r, w = os.pipe()
    os.set_inheritable(r, True)
    other = os.open("/dev/null", os.O_RDONLY)  # close-on-exec (Python's default)
    try:
        agree(lambda m: m.check_output(py(FD_DUMP)))
        agree(lambda m: m.check_output(py(FD_DUMP), close_fds=True))
        fds = agree(lambda m: m.check_output(py(FD_DUMP), close_fds=False))[1]
        assert str(r).encode() in fds and str(other).encode() not in fds
        agree(lambda m: m.check_output(py(FD_DUMP), pass_fds=[w]))
        agree(lambda m: m.check_output(py(FD_DUMP), pass_fds=(w, other)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            agree(lambda m: m.check_output(py(FD_DUMP), pass_fds=[w], close_fds=False))
        assert [str(c.message) for c in caught] == ["pass_fds overriding close_fds."] * 2
    finally:
        for fd in (r, w, other):
            os.close(fd)


def test_passed_fd_is_usable_in_the_child():
    def use(m):
        r, w = os.pipe()
        try:
            m.run(py(f"import os; os.write({w}, b'through fd {w}')"), pass_fds=[w])
            os.close(w)
            return os.read(r, 100).replace(str(w).encode(), b"W")
        finally:
            os.close(r)
    agree(use)


def test_bad_pass_fds():
    agree(lambda m: m.run(["true"], pass_fds=[-1]))


# ---------------------------------------------------------------- signals

STATUS = ("import re; s = open('/proc/self/status').read(); "
          "print(re.findall(r'^(Sig(?:Blk|Ign)):\\s*(\\w+)', s, re.M))")


def test_restore_signals():
    kind, out = agree(lambda m: m.check_output(py(STATUS)))
    agree(lambda m: m.check_output(py(STATUS), restore_signals=False))


def test_sigpipe_default_in_child():
    # yes | head: with SIGPIPE restored, `yes` dies of SIGPIPE (-13 in the pipeline's first).
    agree(lambda m: m.run(["sh", "-c", "yes | head -1; echo ${PIPESTATUS:-done}"],
                          capture_output=True))
    agree(lambda m: m.run(["sh", "-c", "trap - PIPE; yes | head -1"], capture_output=True,
                          restore_signals=False))


def test_signal_mask_is_inherited():
    old = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1, signal.SIGWINCH])
    try:
        kind, out = agree(lambda m: m.check_output(py(STATUS)))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def test_send_signal_terminate_kill():
    def sig(m, how):
        p = m.Popen(["sleep", "30"])
        try:
            assert p.poll() is None
            if how == "terminate":
                p.terminate()
            elif how == "kill":
                p.kill()
            else:
                p.send_signal(signal.SIGUSR2)
            return p.wait(), p.returncode, p.poll()
        finally:
            p.kill()
            p.wait()
    for how in ("terminate", "kill", "usr2"):
        agree(lambda m: sig(m, how))


def test_send_signal_after_exit_is_a_no_op():
    def dead(m):
        p = m.Popen(["true"])
        p.wait()
        p.send_signal(signal.SIGKILL)
        p.terminate()
        p.kill()
        return p.returncode
    agree(dead)

    def exited_not_waited(m):
        p = m.Popen(["true"])
        time.sleep(0.2)
        p.send_signal(signal.SIGTERM)  # polls first: the child has exited, nothing sent
        return p.returncode
    agree(exited_not_waited)


def test_terminate_from_another_thread_while_waiting():
    def waiter(m):
        p = m.Popen(["sleep", "30"])
        t = threading.Timer(0.2, p.terminate)
        t.start()
        rc = p.wait()
        t.join()
        return rc
    agree(waiter)


# ---------------------------------------------------------------- waits and timeouts

def test_poll_and_wait():
    def life(m):
        p = m.Popen(["sh", "-c", "read x; exit 9"], stdin=m.PIPE)
        first = p.poll()
        p.stdin.close()
        return first, p.wait(), p.poll(), p.returncode, p.wait()
    agree(life)


def test_wait_timeout():
    def w(m):
        p = m.Popen(["sleep", "30"])
        try:
            p.wait(timeout=0.1)
        finally:
            p.kill()
            p.wait()
    kind, e = agree(w)
    assert e["type"] is std.TimeoutExpired and e["timeout"] == 0.1
    agree(lambda m: m.Popen(["sh", "-c", "exit 2"]).wait(timeout=30))

    def zero(m):
        p = m.Popen(["sleep", "30"])
        try:
            return p.wait(timeout=0)
        finally:
            p.kill()
            p.wait()
    agree(zero)


def test_run_timeout_keeps_partial_output_and_kills():
    def run(m):
        t0 = time.monotonic()
        try:
            m.run(py("import sys, time; print('start', flush=True); "
                     "sys.stderr.write('err\\n'); sys.stderr.flush(); time.sleep(30)"),
                  capture_output=True, timeout=2)
        finally:
            assert time.monotonic() - t0 < 20  # killed, not waited out
    kind, e = agree(run)
    assert e["type"] is std.TimeoutExpired
    assert e["output"] == b"start\n" and e["stderr"] == b"err\n" and e["timeout"] == 2


def test_run_timeout_text_mode():
    # The partial output stays bytes even in text mode (as CPython).
    agree(lambda m: m.run(py("import time; print('x', flush=True); time.sleep(30)"),
                          stdout=m.PIPE, text=True, timeout=2))


def test_communicate_timeout_then_retry():
    def comm(m):
        code = ("import sys, time; print('first', flush=True); time.sleep(1.5); "
                "print(sys.stdin.read().upper())")
        with m.Popen(py(code), stdin=m.PIPE, stdout=m.PIPE, stderr=m.PIPE) as p:
            try:
                p.communicate(b"input", timeout=0.5)
            except m.TimeoutExpired as e:
                partial = (e.output, e.stderr, e.timeout, e.cmd == p.args)
            with pytest.raises(ValueError, match="Cannot send input"):
                p.communicate(b"more")
            return partial, p.communicate(timeout=30), p.returncode
    agree(comm)


def test_call_timeout_kills():
    kind, e = agree(lambda m: m.call(["sleep", "30"], timeout=0.2))
    assert e["type"] is std.TimeoutExpired


def test_large_output_both_ways():
    big = bytes(range(256)) * (10 * 1024 * 1024 // 256)  # 10 MiB

    def cat(m):
        r = m.run(["cat"], input=big, capture_output=True)
        return r.returncode, r.stdout == big, len(r.stdout), r.stderr

    assert agree(cat) == ("ok", (0, True, len(big), b""))

    def both(m):
        code = ("import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d); "
                "sys.stderr.buffer.write(d[::-1])")
        r = m.run(py(code), input=big, capture_output=True, timeout=120)
        return r.stdout == big, r.stderr == big[::-1]
    assert agree(both) == ("ok", (True, True))


def test_large_output_with_timeout():
    big = b"x" * (8 * 1024 * 1024)
    agree(lambda m: len(m.run(["cat"], input=big, capture_output=True, timeout=120).stdout))


def test_input_to_a_child_that_does_not_read():
    agree(lambda m: m.run(["true"], input=b"x" * (1 << 20)))
    agree(lambda m: m.run(["sh", "-c", "exec 0<&-; echo closed"], input=b"y" * (1 << 20),
                          capture_output=True))


# ---------------------------------------------------------------- sessions, credentials

def test_start_new_session_and_process_group():
    code = "import os; p = os.getpid(); print(os.getsid(0) == p, os.getpgid(0) == p)"
    assert agree(lambda m: m.check_output(py(code)))[1] == b"False False\n"
    assert agree(lambda m: m.check_output(py(code), start_new_session=True))[1] == b"True True\n"
    assert agree(lambda m: m.check_output(py(code), process_group=0))[1] == b"False True\n"


@pytest.mark.skipif(not is_root(), reason="needs root to change credentials")
def test_user_group_extra_groups():
    code = "import os; print(os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups()))"
    agree(lambda m: m.check_output(py(code), user=65534))
    agree(lambda m: m.check_output(py(code), group=65534))
    agree(lambda m: m.check_output(py(code), user=65534, group=65534, extra_groups=[]))
    agree(lambda m: m.check_output(py(code), extra_groups=[1, 2, 65534]))
    agree(lambda m: m.check_output(py(code), user="nobody", group="nogroup"))
    agree(lambda m: m.run(["true"], user=-1))
    agree(lambda m: m.run(["true"], user="no-such-user-spawnkit"))
    agree(lambda m: m.run(["true"], group=1.5))
    agree(lambda m: m.run(["true"], extra_groups="1"))


@pytest.mark.skipif(is_root(), reason="as root the credential change succeeds")
def test_user_change_denied():
    agree(lambda m: m.run(["true"], user=0 if os.geteuid() else 1))


def test_umask():
    code = "import os; print(oct(os.umask(0)))"
    for mask in (0o077, 0, 0o022, 0o777):
        agree(lambda m: m.check_output(py(code), umask=mask))
    agree(lambda m: m.check_output(py(code)))


# ---------------------------------------------------------------- preexec_fn

def test_preexec_fn_runs_in_the_child(tmp_path):
    def pre(m):
        marker = tmp_path / f"marker-{m.__name__}"

        def hook():
            marker.write_text(str(os.getpid()))
            os.setsid()
        code = "import os; print(os.getsid(0) == os.getpid())"
        p = m.Popen(py(code), stdout=m.PIPE, preexec_fn=hook)
        out, _ = p.communicate()
        return out, int(marker.read_text()) == p.pid, p.returncode
    assert agree(pre) == ("ok", (b"True\n", True, 0))


def test_preexec_fn_exception():
    kind, e = agree(lambda m: m.run(["true"], preexec_fn=lambda: 1 / 0))
    assert e["type"] is std.SubprocessError
    assert e["str"] == "Exception occurred in preexec_fn."
    agree(lambda m: m.run(["true"], preexec_fn=lambda: os.close(12345)))


def test_preexec_fn_that_exits_gives_a_popen(tmp_path):
    # CPython's parent reads EOF on its error pipe from a child that ends in preexec_fn
    # without reporting an exception: no error, a Popen whose child ran the hook and whose
    # wait() gives that end (the program never ran).
    def exits(m, end):
        marker = tmp_path / f"pid-{m.__name__}"

        def hook():
            marker.write_text(str(os.getpid()))
            end()
        p = m.Popen(py("print('ran')"), stdout=m.PIPE, preexec_fn=hook)
        with p:
            out, _ = p.communicate()
        return p.returncode, out, int(marker.read_text()) == p.pid

    assert agree(lambda m: exits(m, lambda: os._exit(7))) == ("ok", (7, b"", True))
    killed = agree(lambda m: exits(m, lambda: os.kill(os.getpid(), signal.SIGKILL)))
    assert killed == ("ok", (-signal.SIGKILL, b"", True))
    assert agree(lambda m: m.run(["true"], preexec_fn=lambda: os._exit(3)).returncode) == (
        "ok", 3)
    # SystemExit is an exception like any other: reported, not an exit.
    kind, e = agree(lambda m: m.run(["true"], preexec_fn=lambda: sys.exit(3)))
    assert e["str"] == "Exception occurred in preexec_fn."


def test_preexec_fn_not_callable():
    agree(lambda m: m.run(["true"], preexec_fn=42))


def test_preexec_fn_with_other_options(tmp_path):
    code = "import os; print(os.getcwd(), oct(os.umask(0)))"
    agree(lambda m: m.check_output(py(code), preexec_fn=lambda: None, cwd=tmp_path,
                                   umask=0o027))
    agree(lambda m: m.run(["spawnkit-no-such-program"], preexec_fn=lambda: None))


# ---------------------------------------------------------------- lifecycle

def test_context_manager():
    def ctx(m):
        with m.Popen(["sh", "-c", "echo hi; exit 4"], stdout=m.PIPE) as p:
            first = p.stdout.read()
        return first, p.returncode, p.stdout.closed
    agree(ctx)

    def ctx_raises(m):
        with m.Popen(["sh", "-c", "exit 1"]) as p:
            raise KeyError("inside")
    agree(ctx_raises)


def test_resource_warning_for_an_unwaited_child():
    def leak(m):
        p = m.Popen(["sleep", "0.5"])
        pid = p.pid
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            del p
            import gc
            gc.collect()
        return [(c.category, str(c.message).replace(str(pid), "PID")) for c in caught]
    assert agree(leak) == ("ok", [(ResourceWarning, "subprocess PID is still running")])
    time.sleep(0.6)
    std._cleanup()  # both modules' leftovers are reaped by the standard _cleanup


def test_no_zombie_after_wait():
    def z(m):
        p = m.Popen(["true"])
        p.wait()
        return os.path.exists(f"/proc/{p.pid}")
    agree(z)


def test_repr_and_attributes():
    def attrs(m):
        with m.Popen(["true"], stdout=m.PIPE, encoding="ascii", errors="ignore") as p:
            p.communicate()
            return (repr(p).replace(m.__name__, "M"), p.args, p.encoding, p.errors,
                    p.text_mode, p.stdin, p.returncode)
    agree(attrs)


def test_universal_newlines_property():
    def unl(m):
        with m.Popen(["true"]) as p:
            before = p.universal_newlines
            p.universal_newlines = 1
            return before, p.universal_newlines, p.text_mode
    agree(unl)


def test_threads_spawning_concurrently():
    def many(m):
        results = []

        def work(i):
            results.append(m.check_output(["echo", str(i)]))
        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sorted(results)
    agree(many)


def test_in_a_script_importing_it():
    def run(m):
        script = ("import sys, subprocess\n"
                  "sys.stdout.write('buffered ')\n"
                  "subprocess.run(['true'])\n"
                  "print('after')\n")
        if m is sk:
            script = script.replace("import sys, subprocess",
                                    "import sys; from spawnkit import subprocess")
        return m.check_output([sys.executable, "-c", script])
    agree(run)


def test_signal_handler_runs_during_wait():
    """Ctrl-C (or any Python signal handler) interrupts a blocking wait, as with waitpid."""
    class Alarm(Exception):
        pass

    def handler(signum, frame):
        raise Alarm("alarm")

    def interrupted(m, timeout):
        p = m.Popen(["sleep", "30"])
        old = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            p.wait(timeout)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            p.kill()
            p.wait()
    kind, e = agree(lambda m: interrupted(m, None))
    assert e["type"] is Alarm
    agree(lambda m: interrupted(m, 30))


def test_keyboard_interrupt_during_wait():
    def ctrl_c(m):
        p = m.Popen(["sleep", "30"])
        try:
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            p.wait()
        finally:
            p.kill()
            p.wait()
    kind, e = agree(ctrl_c)
    assert e["type"] is KeyboardInterrupt if kind == "raised" else True


def test_sigchld_ignored():
    def ignored(m):
        old = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        try:
            p = m.Popen(["sh", "-c", "exit 3"])
            return p.wait(), p.poll()
        finally:
            signal.signal(signal.SIGCHLD, old)
    agree(ignored)


def test_child_reaped_behind_popens_back():
    def stolen(m):
        p = m.Popen(["sh", "-c", "exit 3"])
        os.waitpid(p.pid, 0)
        return p.wait(), p.poll()
    agree(stolen)


def test_pipesize():
    def size(m):
        import fcntl
        with m.Popen(["true"], stdout=m.PIPE, pipesize=1 << 16) as p:
            return fcntl.fcntl(p.stdout.fileno(), fcntl.F_GETPIPE_SZ)
    agree(size)


def test_pass_fds_naming_a_redirected_standard_stream():
    agree(lambda m: m.check_output(py(FD_DUMP), pass_fds=[1]))
    agree(lambda m: m.run(py(FD_DUMP), pass_fds=[0, 2], capture_output=True))


def test_duplicate_environment_names():
    agree(lambda m: m.check_output(py(ENV_DUMP), env={"A": "1", b"A": "2"}))


def test_empty_program_name():
    agree(lambda m: m.run([""]))
    agree(lambda m: m.run([b""], env={"PATH": "/nonexistent"}))
    agree(lambda m: m.run(["x"], executable=""))


def test_empty_program_is_checked_after_cwd_and_env():
    # CPython checks the environment and cwd (in the parent, then chdir in the child) before
    # the empty name fails at exec: the errors are the cwd's and the environment's.
    agree(lambda m: m.run([""], cwd="/nonexistent"))
    agree(lambda m: m.run([b""], cwd="/nonexistent", env={"PATH": "/nonexistent"}))
    agree(lambda m: m.run(["x"], executable="", cwd="/nonexistent"))
    agree(lambda m: m.run(["x"], executable="", env={"A": "b\0c"}))
    agree(lambda m: m.run(["x"], executable="", env={"A\0": "b"}))
    agree(lambda m: m.run(["x"], executable="", cwd="/tmp\0x"))
    agree(lambda m: m.run(["x"], executable="", env={"A": "\udcff\ud800"}))
    agree(lambda m: m.run([""], cwd="\ud800"))


def test_argument_list_too_long():
    agree(lambda m: m.run(["true"] + ["x" * (200 * 1024)] * 20))


def test_preexec_fn_chdir_and_fds():
    agree(lambda m: m.check_output(["pwd"], preexec_fn=lambda: os.chdir("/tmp")))
    agree(lambda m: m.run(["true"], close_fds=False, preexec_fn=lambda: None).returncode)


def test_integer_argument_limits():
    for kw in ({"extra_groups": [2**64]}, {"extra_groups": [2**32]}, {"user": 2**64},
               {"user": 2**32}, {"group": 2**40}, {"group": 2**64}, {"umask": 2**40},
               {"umask": -2**40}, {"process_group": 2**31}, {"pass_fds": [2**40]},
               {"pass_fds": [2**31 - 1]}):
        agree(lambda m: m.run(["true"], **kw))


@pytest.mark.skipif(not is_root(), reason="needs root to change credentials")
def test_id_all_ones_is_refused():
    # A deliberate difference (README): CPython passes 2**32 - 1 on as (uid_t)-1, which
    # setreuid takes as "no change", so the child silently stays root. spawnkit refuses it.
    code = "import os; print(os.getuid(), os.getgid())"
    assert std.check_output(py(code), user=2**32 - 1, group=2**32 - 1) == b"0 0\n"
    for kw in ({"user": 2**32 - 1}, {"group": 2**32 - 1}):
        with pytest.raises(ValueError, match=r"is not an id"):
            sk.check_output(py(code), **kw)
    # In the supplementary groups the kernel refuses it itself (EINVAL): both agree.
    agree(lambda m: m.run(["true"], extra_groups=[2**32 - 1]))


def test_fds_opened_by_preexec_fn_are_closed():
    def hook_opens(m):
        fds = []

        def hook():
            fds.append(os.open("/dev/null", os.O_RDONLY))
            os.set_inheritable(fds[-1], True)
        out = m.check_output(py(FD_DUMP), preexec_fn=hook)
        return out
    agree(hook_opens)


def test_odd_but_accepted_arguments():
    agree(lambda m: m.run(["true"], pass_fds=["3"]))  # int() is mapped over pass_fds
    agree(lambda m: m.run(["true"], umask="022"))
    agree(lambda m: m.run(["true"], stdout=-5))  # EBADF in the child
    agree(lambda m: m.run(["true"], stdout=m.STDOUT))  # STDOUT is only for stderr
    agree(lambda m: m.run(["true"], stdin=-3, cwd="/"))
    agree(lambda m: m.run(["true"], stdin=object()))
    agree(lambda m: m.run(["true"], cwd=3))


# ---------------------------------------------------------------- timeouts beyond a lock's

def test_huge_and_infinite_timeouts():
    # Beyond threading.TIMEOUT_MAX (~292 years): CPython waits; a lock's timeout would
    # overflow (OverflowError: timestamp out of range for platform time_t).
    import math
    for t in (math.inf, 1e10, threading.TIMEOUT_MAX * 2):
        assert agree(lambda m: m.Popen(["sh", "-c", "exit 3"]).wait(timeout=t)) == ("ok", 3)
        assert agree(lambda m: m.call(["sh", "-c", "exit 4"], timeout=t)) == ("ok", 4)
        assert agree(lambda m: m.run(["true"], timeout=t).returncode) == ("ok", 0)


def test_nan_timeout_waits_for_the_exit():
    # CPython's wait loop never finds a NaN timeout up: it waits for the exit.
    def w(m):
        t0 = time.monotonic()
        rc = m.Popen(["sh", "-c", "sleep 0.3; exit 5"]).wait(timeout=float("nan"))
        return rc, time.monotonic() - t0 >= 0.25
    assert agree(w) == ("ok", (5, True))


# ---------------------------------------------------------------- a spawn server restarted

SERVE_BIN = next((p for p in (pathlib.Path(__file__).resolve().parent.parent / "target" / b
                              / "spawnkit" for b in ("debug", "release")) if p.exists()), None)


def _start_serve(sock):
    for p in (sock, sock + ".key"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    srv = std.Popen([SERVE_BIN, "serve", "--socket", sock], stdout=std.DEVNULL,
                    stderr=std.DEVNULL)
    for _ in range(200):
        if os.path.exists(sock) and os.path.exists(sock + ".key"):
            return srv
        time.sleep(0.05)
    srv.kill()
    srv.wait()
    pytest.fail("spawnkit serve did not start")


@pytest.mark.skipif(SERVE_BIN is None, reason="target/*/spawnkit is not built (scripts/test "
                                              "builds it)")
def test_use_server_connects_again_after_the_server_restarts(tmp_path):
    sock = str(tmp_path / "sock")
    srv = _start_serve(sock)
    sk.use_server(sock)
    try:
        assert sk.run(["sh", "-c", "exit 6"], timeout=10).returncode == 6
        srv.kill()
        srv.wait()
        # The spawn that meets the dead connection fails, and is not sent again.
        with pytest.raises(ConnectionError):
            sk.run(["true"], timeout=10)
        # No server at the path: the next spawn tries to connect again, and fails.
        with pytest.raises(OSError):
            sk.run(["true"], timeout=10)
        srv = _start_serve(sock)
        # A server at the same path again: the next spawn connects to it (its child).
        r = sk.run(py("import os; print(os.getppid())"), capture_output=True, timeout=10)
        assert (r.returncode, int(r.stdout)) == (0, srv.pid)
        # ... and the connection is kept for the spawns after it.
        assert sk.run(["true"], timeout=10).returncode == 0
        # Killed while a spawn is not in flight, the server's restart is seen again.
        srv.kill()
        srv.wait()
        srv = _start_serve(sock)
        with pytest.raises(ConnectionError):
            sk.run(["true"], timeout=10)
        r = sk.run(py("import os; print(os.getppid())"), capture_output=True, timeout=10)
        assert int(r.stdout) == srv.pid
    finally:
        sk.use_server(None)
        srv.kill()
        srv.wait()
