"""A Python process that has only ever had one thread: its inherited environment is compared
in place with the copy the last spawn took and that copy used again when nothing changed
(spawnkit::Command::base_env_now, under the GIL). Every kind of change through os.environ
and os.putenv must still reach the child, locally and through a private server. Runs in a
fresh interpreter (pytest itself may have threads)."""

import subprocess as std
import sys

SCRIPT = r"""
import ctypes, os, sys
import spawnkit
from spawnkit import subprocess

flag = ctypes.c_char.in_dll(ctypes.CDLL(None), "__libc_single_threaded")
assert flag.value == b"\x01", "the interpreter must start with one thread"

def std_view():
    # What libc's environ holds now, as Rust's std::env::vars_os reads it.
    out = []
    for entry in ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ"):
        if entry is None:
            break
        eq = entry.find(b"=", 1)
        if entry and eq > 0:
            out.append(entry + b"\0")
    return b"".join(out)

server = spawnkit.Server()
steps = [
    ("unchanged", lambda: None),
    ("unchanged again", lambda: None),
    ("a new variable", lambda: os.environ.__setitem__("SPAWNKIT_PY_ONE", "one")),
    ("same length", lambda: os.environ.__setitem__("SPAWNKIT_PY_ONE", "two")),
    ("longer", lambda: os.environ.__setitem__("SPAWNKIT_PY_ONE", "three!")),
    ("os.putenv only", lambda: os.putenv("SPAWNKIT_PY_PUT", "x")),
    ("removed", lambda: os.environ.pop("SPAWNKIT_PY_ONE")),
    ("os.unsetenv only", lambda: os.unsetenv("SPAWNKIT_PY_PUT")),
    ("empty value", lambda: os.environ.__setitem__("SPAWNKIT_PY_ONE", "")),
    ("cleared", lambda: os.environ.clear()),
    ("one after the clear", lambda: os.environ.__setitem__("SPAWNKIT_PY_ONE", "back")),
]
n = 0
for what, change in steps:
    change()
    want = std_view()
    for via in (None, server):
        subprocess.use_server(via)
        for _ in range(2):
            got = subprocess.run(["/bin/cat", "/proc/self/environ"], capture_output=True).stdout
            assert got == want, (what, "server" if via else "local", got, want)
            n += 1
    subprocess.use_server(None)
assert flag.value == b"\x01", "the interpreter gained a thread: nothing more was tested"
print(n)
"""


def test_every_change_reaches_the_child_with_one_thread():
    r = std.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "44", r.stdout
