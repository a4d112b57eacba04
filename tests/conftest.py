"""Shared helpers: run one behaviour against the standard `subprocess` and against
`spawnkit.subprocess`, and describe outcomes (values or exceptions) so they can be compared."""

import os
import subprocess as std_subprocess
import sys

import pytest

from spawnkit import subprocess as sk_subprocess

MODULES = {"std": std_subprocess, "spawnkit": sk_subprocess}
PY = sys.executable


@pytest.fixture(params=list(MODULES), ids=list(MODULES))
def sp(request):
    """Each test using `sp` runs once with each module."""
    return MODULES[request.param]


def describe_exc(e):
    """What a user can observe of an exception: its class and every attribute subprocess
    exceptions carry."""
    d = {"type": type(e), "args": e.args if not isinstance(e, OSError) else None}
    for attr in ("errno", "strerror", "filename", "filename2", "returncode", "cmd",
                 "output", "stdout", "stderr", "timeout"):
        if hasattr(e, attr):
            d[attr] = getattr(e, attr)
    if isinstance(e, OSError):
        d["str"] = str(e)
    elif isinstance(e, std_subprocess.SubprocessError) or isinstance(e, (ValueError, TypeError)):
        d["str"] = str(e)
    return d


def normalize(v):
    """Make results comparable: a CompletedProcess as its fields."""
    if isinstance(v, std_subprocess.CompletedProcess):
        return ("CompletedProcess", v.args, v.returncode, v.stdout, v.stderr)
    if isinstance(v, tuple):
        return tuple(normalize(x) for x in v)
    if isinstance(v, list):
        return [normalize(x) for x in v]
    return v


def outcome(fn, mod):
    try:
        return ("ok", normalize(fn(mod)))
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - compare exceptions
        return ("raised", describe_exc(e))


def agree(fn):
    """Run fn(std) and fn(spawnkit); assert both give the same value or the same exception
    (class and attributes); return the common outcome."""
    a = outcome(fn, std_subprocess)
    b = outcome(fn, sk_subprocess)
    assert a == b, f"\n standard subprocess: {a!r}\n spawnkit.subprocess: {b!r}"
    return a


def py(code):
    """argv for a small Python child (-S: fast start, no site packages)."""
    return [PY, "-S", "-c", code]


def is_root():
    return os.geteuid() == 0
