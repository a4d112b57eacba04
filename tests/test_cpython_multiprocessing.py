"""CPython's own Lib/test/_test_multiprocessing.py, installed for the "spawnkit" start method
(``install_tests_in_module_dict(globals(), "spawnkit", only_type="processes")``) and for
"forkserver" in the same run: everything that passes for forkserver must pass for spawnkit.

The two run side by side in child interpreters. Two tests are skipped by CPython itself for any
method but forkserver (test_forkserver_sigint, test_forkserver_sigkill: they kill the forkserver
process); README lists them.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

RUNNER = textwrap.dedent("""
    import importlib, json, sys, unittest
    name = sys.argv[1]
    module = importlib.import_module(name)
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    module.setUpModule()
    try:
        result = unittest.TextTestRunner(stream=sys.stderr, verbosity=1).run(suite)
    finally:
        module.tearDownModule()
    bad = [t.id().split(".", 1)[1] for t, _ in result.failures + result.errors]
    skipped = [t.id().split(".", 1)[1] for t, _ in result.skipped]
    print(json.dumps({"run": result.testsRun, "bad": bad, "skipped": skipped}))
""")


def test_cpython_multiprocessing_suite_passes_for_spawnkit_as_for_forkserver():
    try:
        import test._test_multiprocessing  # noqa: F401
    except ImportError:
        pytest.skip("this Python has no test package (Lib/test)")
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    procs = {m: subprocess.Popen([sys.executable, "-c", RUNNER, "cpython_mp_" + m],
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env,
                                 cwd=os.path.dirname(__file__))
             for m in ("spawnkit", "forkserver")}
    results = {}
    for m, p in procs.items():
        out, err = p.communicate(timeout=1200)
        lines = out.strip().splitlines()
        assert lines, f"{m}: no result; stderr tail:\n" + "\n".join(err.splitlines()[-40:])
        results[m] = json.loads(lines[-1])
        results[m]["tail"] = "\n".join(err.splitlines()[-40:])
    sk, fs = results["spawnkit"], results["forkserver"]
    assert sk["run"] == fs["run"] > 100, (sk["run"], fs["run"])
    passed = sk["run"] - len(sk["bad"]) - len(sk["skipped"])
    assert passed > 100, f"only {passed} passed for spawnkit\n{sk['tail']}"
    worse = sorted(set(sk["bad"]) - set(fs["bad"]))
    assert not worse, f"fail for spawnkit, pass for forkserver: {worse}\n{sk['tail']}"
    # Only CPython's own forkserver-only tests are skipped beyond forkserver's skips.
    extra_skips = {t.rsplit(".", 1)[1] for t in set(sk["skipped"]) - set(fs["skipped"])}
    assert extra_skips <= {"test_forkserver_sigint", "test_forkserver_sigkill"}, extra_skips
