"""Python threads add and remove os.environ keys while other threads spawn (issue 11).

CPython's os.environ writers call libc setenv/unsetenv with the GIL held and without Rust's
environment lock; the engine must copy the inherited environment under the GIL, or a copy
taken while a writer frees the old `environ` crashes (SIGSEGV) or hands execve a bad pointer
(EFAULT). The churn runs in a child interpreter, so a crash is an exit status, not a dead
test run.
"""

import os
import subprocess as std
import sys

CHURN = r"""
import errno, os, sys, threading, time
import spawnkit
from spawnkit import subprocess

seconds = float(sys.argv[1])
stop = time.monotonic() + seconds
failures = []
spawned = [0]

def churn(tag):
    i = 0
    while time.monotonic() < stop:
        os.environ[f"SPAWNKIT_CHURN_{tag}_{i % 500}"] = "v" * (i % 97)
        if i % 500 == 499:
            for j in range(500):
                os.environ.pop(f"SPAWNKIT_CHURN_{tag}_{j}", None)
        i += 1

def spawn(kind):
    while time.monotonic() < stop:
        try:
            if kind == 1:
                rc = spawnkit.Command("/bin/true").status()
            elif kind == 2:
                # glibc's posix_spawn, which must not read PATH from the live environment
                rc = spawnkit.Command("true").strategy("posix-spawn").status()
            else:
                rc = subprocess.run(["/bin/true"]).returncode
            if rc != 0:
                failures.append(f"exit status {rc}")
            spawned[0] += 1
        except OSError as e:
            failures.append(f"{e!r} (errno {errno.errorcode.get(e.errno, e.errno)})")

threads = [threading.Thread(target=churn, args=(t,)) for t in "AB"]
threads += [threading.Thread(target=spawn, args=(k % 3,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(spawned[0], len(failures))
for f in failures[:10]:
    print(f)
sys.exit(1 if failures else 0)
"""


def test_environment_churn_beside_spawning_threads():
    seconds = float(os.environ.get("SPAWNKIT_CHURN_SECONDS", "30"))
    r = std.run([sys.executable, "-c", CHURN, str(seconds)], capture_output=True, text=True,
                timeout=seconds + 120)
    assert r.returncode == 0, (
        f"exit status {r.returncode} (negative: killed by that signal)\n{r.stdout}{r.stderr}")
    spawned, failed = map(int, r.stdout.split()[:2])
    assert failed == 0 and spawned > 0, r.stdout
