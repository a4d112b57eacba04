from collections.abc import Iterable
from typing import Literal

from ._native import MemoryInfo as MemoryInfo
from ._native import ProcessInfo as ProcessInfo
from ._native import SharedRegion as SharedRegion
from ._native import SharedReport as SharedReport

__all__ = [
    "ProcessInfo",
    "MemoryInfo",
    "SharedRegion",
    "SharedReport",
    "ps",
    "ps_backend",
    "memory",
    "shared_regions",
    "shared_report",
]

_Pids = int | Iterable[int]
_Backend = Literal["auto", "bpf", "procfs"]

def ps(
    *,
    pids: _Pids | None = None,
    ppid: _Pids | None = None,
    tree_of: _Pids | None = None,
    uid: bool = False,
    cmdline: bool = False,
    backend: _Backend = "auto",
) -> list[ProcessInfo]: ...
def ps_backend(backend: _Backend = "auto") -> tuple[str, str | None]: ...
def memory(pids: _Pids | None = None, *, top: int | None = None) -> list[MemoryInfo]: ...
def shared_report(pids: _Pids | None = None) -> SharedReport: ...
def shared_regions(pids: _Pids | None = None) -> list[SharedRegion]: ...
