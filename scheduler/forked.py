"""Parts of one large input parsed side by side: this process takes the first,
forked children the others (the simulator's intake of YAML and JSON dumps).

A child has its text already (fork copies nothing until written), parses it
and writes the result back through a pipe, marshalled when it can be (plain
dicts, lists, strings and numbers: several times cheaper than a pickle) and
pickled otherwise (a datetime from an unquoted YAML timestamp). No executor:
sending each child its part would cost a pickle of megabytes of text, and the
executor's threads would take the GIL from this process's own part.
"""

from __future__ import annotations

import marshal
import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any


def workers() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def can_fork() -> bool:
    # Forking a process that runs other threads can copy a held lock.
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def parse_all(texts: Sequence[str], parse: Callable[[str], Any]) -> list[Any] | None:
    """parse(text) for each text (the first here, the others in forked children),
    or None as soon as one of them gives None or fails."""
    children: list[tuple[int, int]] = []
    try:
        for t in texts[1:]:
            children.append(_fork(t, parse))
        first = parse(texts[0])
        if first is None:
            return None
        out = [first]
        while children:
            pid, fd = children.pop(0)
            with os.fdopen(fd, "rb") as f:
                data = f.read()
            os.waitpid(pid, 0)
            if data[:1] == b"M":
                out.append(marshal.loads(memoryview(data)[1:]))
            elif data[:1] == b"P":
                out.append(pickle.loads(memoryview(data)[1:]))
            else:
                return None
        return out
    finally:
        for pid, fd in children:  # not read: an error, or an unusable part
            os.close(fd)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _fork(text: str, parse: Callable[[str], Any]) -> tuple[int, int]:
    """A child parsing `text`: its pid and the pipe to read its result from."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        code = 1
        try:
            os.close(r)
            data = _result_bytes(parse(text))
            with os.fdopen(w, "wb") as f:
                f.write(data)
            code = 0
        except BaseException:  # the parent reads an empty result and parses it all
            pass
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _result_bytes(result: Any) -> bytes:
    if result is None:
        return b"N"
    try:
        return b"M" + marshal.dumps(result)
    except ValueError:
        return b"P" + pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
