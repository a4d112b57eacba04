"""spawnkit: launch Linux processes fast and safely."""

from collections.abc import Iterable
from typing import Any

from _typeshed import StrOrBytesPath

from . import _native
from . import observe as observe
from . import subprocess as subprocess
from .observe import MemoryInfo as MemoryInfo
from .observe import ProcessInfo as ProcessInfo
from .observe import SharedRegion as SharedRegion
from .observe import SharedReport as SharedReport
from .observe import memory as memory
from .observe import ps as ps
from .observe import ps_backend as ps_backend
from .observe import shared_regions as shared_regions
from .observe import shared_report as shared_report
from .subprocess import DEVNULL as DEVNULL
from .subprocess import PIPE as PIPE
from .subprocess import STDOUT as STDOUT
from .subprocess import CompletedProcess
from .subprocess import Popen as Popen

__all__ = [
    "Command",
    "Popen",
    "PIPE",
    "DEVNULL",
    "STDOUT",
    "INHERIT",
    "RLIM_INFINITY",
    "STRATEGIES",
    "NAMESPACES",
    "PATH_SEARCHES",
    "Server",
    "connect",
    "reap_orphans",
    "spawn_many",
    "uses_clone3",
    "subprocess",
    "observe",
    "ps",
    "ps_backend",
    "memory",
    "shared_regions",
    "shared_report",
    "ProcessInfo",
    "MemoryInfo",
    "SharedRegion",
    "SharedReport",
]

INHERIT: None
RLIM_INFINITY: int
STRATEGIES: tuple[str, ...]
NAMESPACES: tuple[str, ...]
PATH_SEARCHES: tuple[str, ...]

Server = _native.Server

def connect(
    path: StrOrBytesPath | None = None, *, key_file: StrOrBytesPath | None = None
) -> _native.Server: ...
def reap_orphans() -> int: ...
def spawn_many(
    commands: Iterable[Command], *, via: _native.Server | None = None, **popen_kwargs: Any
) -> list[Popen[Any] | Exception]: ...
def uses_clone3() -> bool: ...

class Command(_native.Command):
    """A process to start: the engine's spawnkit::Command (see spawnkit._native.Command)."""

    def spawn(
        self, *, via: _native.Server | None = None, _submit_only: bool = False, **popen_kwargs: Any
    ) -> Popen[Any]: ...
    def output(
        self, input: bytes | str | None = None, timeout: float | None = None, **popen_kwargs: Any
    ) -> CompletedProcess[Any]: ...
    def status(self, timeout: float | None = None) -> int: ...
