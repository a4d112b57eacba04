"""The PyO3 glue (crates/spawnkit-py). Use spawnkit.subprocess or spawnkit.Command instead."""

from collections.abc import Callable, Iterable, Mapping
from typing import Any, final

from _typeshed import StrOrBytesPath

__all__ = [
    "Child",
    "spawn",
    "plan",
    "reap_orphans",
    "uses_clone3",
    "STRATEGIES",
    "RLIM_INFINITY",
    "NAMESPACES",
]

STRATEGIES: list[str]
RLIM_INFINITY: int
NAMESPACES: list[str]

@final
class Child:
    """A started child process, held by its pidfd."""

    @property
    def pid(self) -> int: ...
    @property
    def pidfd(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def fileno(self) -> int: ...
    def wait(self) -> int: ...
    def try_wait(self) -> int | None: ...
    def wait_timeout(self, timeout: float) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...

def spawn(
    program: StrOrBytesPath,
    argv: Iterable[StrOrBytesPath],
    env: Mapping[Any, Any] | None,
    cwd: StrOrBytesPath | None,
    stdin: int | None,
    stdout: int | None,
    stderr: int | None,
    close_fds: bool,
    pass_fds: Iterable[int] | None,
    restore_signals: bool,
    setsid: bool,
    pgid: int | None,
    uid: int | None,
    gid: int | None,
    groups: Iterable[int] | None,
    umask: int | None,
    preexec_fn: Callable[[], object] | None,
    options: Any,
    compat: bool,
) -> Child: ...
def plan(
    program: StrOrBytesPath,
    argv: Iterable[StrOrBytesPath],
    env: Mapping[Any, Any] | None,
    cwd: StrOrBytesPath | None,
    stdin: int | None,
    stdout: int | None,
    stderr: int | None,
    close_fds: bool,
    pass_fds: Iterable[int] | None,
    restore_signals: bool,
    setsid: bool,
    pgid: int | None,
    uid: int | None,
    gid: int | None,
    groups: Iterable[int] | None,
    umask: int | None,
    preexec_fn: Callable[[], object] | None,
    options: Any,
) -> str: ...
def reap_orphans() -> int: ...
def uses_clone3() -> bool: ...
