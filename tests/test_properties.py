"""Property tests: any argv and environment reaches the child exactly as with subprocess."""

import os
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import agree, py

# Any bytes but NUL (which both modules refuse with the same ValueError, tested elsewhere).
arg = st.binary(max_size=40).filter(lambda b: b"\0" not in b)
name = st.text(string.ascii_letters + "_", min_size=1, max_size=12)

ECHO_ARGV = ("import os, sys; sys.stdout.buffer.write(repr([os.fsencode(a) for a in "
             "sys.argv[1:]]).encode())")
ECHO_ENV = ("import os, sys; sys.stdout.buffer.write(repr(sorted("
            "(k, v) for k, v in os.environb.items() if k != b'LC_CTYPE')).encode())")

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(st.one_of(arg, st.text(max_size=20).filter(lambda s: "\0" not in s)),
                max_size=6))
def test_argv_round_trip(args):
    kind, out = agree(lambda m: m.check_output(py(ECHO_ARGV) + args))
    assert kind == "ok"
    assert eval(out) == [a if isinstance(a, bytes) else os.fsencode(a) for a in args]


@SETTINGS
@given(st.dictionaries(name, arg, max_size=6))
def test_env_round_trip(env):
    kind, out = agree(lambda m: m.check_output(py(ECHO_ENV), env=env))
    assert kind == "ok"
    assert eval(out) == sorted((k.encode(), v) for k, v in env.items())
