"""The "spawnkit" start method for multiprocessing (a zygote with a warm pool of workers)."""

from collections.abc import Sequence
from typing import ClassVar
from multiprocessing import context as _context
from multiprocessing import popen_fork, process

__all__ = ["get_context", "set_preload", "set_pool_size", "SpawnkitContext", "Popen"]

METHOD: str

class _DupFd:
    ind: int
    def __init__(self, ind: int) -> None: ...
    def detach(self) -> int: ...

class Popen(popen_fork.Popen):
    method: ClassVar[str]
    DupFd: ClassVar[type[_DupFd]]
    def duplicate_for_child(self, fd: int) -> int: ...

class SpawnkitProcess(process.BaseProcess): ...

class SpawnkitContext(_context.BaseContext):
    Process: type[SpawnkitProcess]  # type: ignore[assignment]
    def set_preload(self, module_names: Sequence[str]) -> None: ...
    def set_pool_size(self, n: int) -> None: ...

def get_context() -> SpawnkitContext: ...
def set_preload(module_names: Sequence[str]) -> None: ...
def set_pool_size(n: int) -> None: ...
