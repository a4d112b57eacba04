"""CPython's _test_multiprocessing for "forkserver", the baseline of
test_cpython_multiprocessing.py (a module of its own so that children can import the tests)."""

import test._test_multiprocessing

test._test_multiprocessing.install_tests_in_module_dict(globals(), "forkserver",
                                                        only_type="processes")
