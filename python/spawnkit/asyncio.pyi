"""asyncio subprocesses started by spawnkit and waited for through their pidfd."""

import asyncio
from asyncio import base_subprocess
from asyncio.subprocess import Process as Process
from collections.abc import Callable, Coroutine
from typing import IO, Any, TypeVar

from _typeshed import StrOrBytesPath

from .subprocess import Popen

__all__ = [
    "create_subprocess_exec",
    "create_subprocess_shell",
    "EventLoop",
    "EventLoopPolicy",
    "new_event_loop",
    "run",
    "Process",
]

_T = TypeVar("_T")
_P = TypeVar("_P", bound=asyncio.BaseProtocol)
_File = int | IO[Any] | None

SPAWN_SLICE: float
PIPE: int
STDOUT: int
DEVNULL: int

class _Transport(base_subprocess.BaseSubprocessTransport):
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol: asyncio.SubprocessProtocol,
        proc: Popen[bytes],
        stdin: _File,
        stdout: _File,
        stderr: _File,
        extra: dict[str, Any] | None = None,
    ) -> None: ...

async def subprocess_exec(
    loop: asyncio.AbstractEventLoop,
    protocol_factory: Callable[[], _P],
    program: StrOrBytesPath,
    *args: StrOrBytesPath,
    stdin: _File = ...,
    stdout: _File = ...,
    stderr: _File = ...,
    universal_newlines: bool = False,
    shell: bool = False,
    bufsize: int = 0,
    encoding: None = None,
    errors: None = None,
    text: bool | None = None,
    **kwargs: Any,
) -> tuple[asyncio.SubprocessTransport, _P]: ...
async def subprocess_shell(
    loop: asyncio.AbstractEventLoop,
    protocol_factory: Callable[[], _P],
    cmd: str | bytes,
    *,
    stdin: _File = ...,
    stdout: _File = ...,
    stderr: _File = ...,
    universal_newlines: bool = False,
    shell: bool = True,
    bufsize: int = 0,
    encoding: None = None,
    errors: None = None,
    text: bool | None = None,
    **kwargs: Any,
) -> tuple[asyncio.SubprocessTransport, _P]: ...
async def create_subprocess_exec(
    program: StrOrBytesPath,
    *args: StrOrBytesPath,
    stdin: _File = None,
    stdout: _File = None,
    stderr: _File = None,
    limit: int = ...,
    **kwds: Any,
) -> Process: ...
async def create_subprocess_shell(
    cmd: str | bytes,
    stdin: _File = None,
    stdout: _File = None,
    stderr: _File = None,
    limit: int = ...,
    **kwds: Any,
) -> Process: ...

class EventLoop(asyncio.SelectorEventLoop): ...
class EventLoopPolicy(asyncio.DefaultEventLoopPolicy): ...

def new_event_loop() -> EventLoop: ...
def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None) -> _T: ...
