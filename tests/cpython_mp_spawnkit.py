"""CPython's _test_multiprocessing for the "spawnkit" start method (run by
test_cpython_multiprocessing.py; a module of its own so that children can import the tests)."""

import test._test_multiprocessing

import spawnkit.multiprocessing  # noqa: F401  (registers the start method)

test._test_multiprocessing.install_tests_in_module_dict(globals(), "spawnkit",
                                                        only_type="processes")
