"""Writing a user's file so that a failure never costs them the previous one.

A recording written in place is lost when the disk fills or the process
dies half way: the old file is already truncated and the new one is
unparseable. :func:`atomic_writer` writes a temporary file next to the
target (the same file system, so the rename is atomic), syncs it to disk and
renames it over the target only once everything is written.

Rewriting keeps what the user set up: an existing file's permission bits
stay as they were (a 0600 recording stays 0600; a new file gets 0666 less the
umask, as ``open(path, "w")`` gives), and a symbolic link stays a link: the
write goes through it to the file it names (a dangling link's target is
created), the temporary file beside that target and renamed over it, so the
rename is still atomic and the link is never replaced by a regular file.

Standard library only, nothing imported at module level but ``os``: ``pyamx
run --stats-file`` uses it and starts without paying for imports.
"""

from __future__ import annotations

import contextlib
import os
from typing import IO, Iterator


def _temporary_beside(path: str) -> tuple[int, str]:
    """``(fd, name)`` of a new file next to ``path``; mode 0666 less the umask, as ``open(path, "w")`` gives."""
    directory, base = os.path.split(os.path.abspath(path))
    for attempt in range(100):
        name = os.path.join(directory, f".{base}.{os.getpid()}.{attempt}.tmp")
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), name
        except FileExistsError:  # a leftover of a killed writer with our pid: take the next name
            continue
    raise FileExistsError(f"no free temporary name next to {path}")


def _through_links(path: str) -> str:
    """The file ``path`` names once every symbolic link is followed: what is replaced, so a link stays a link."""
    return os.path.realpath(path)


def _keep_mode(fd: int, target: str) -> None:
    """Give the new file the mode of the one it replaces: renaming a fresh file over it would reset it."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:  # a new file: the umask's default, as open(path, "w") gives
        return
    # The permission bits only: a set-user-ID bit copied onto a file this process now owns would
    # grant what the old file's owner granted.
    os.fchmod(fd, mode & 0o777)


def _sync_directory(directory: str) -> None:
    # The rename itself reaches the disk only with the directory; where that cannot be opened
    # (not POSIX), the file's own fsync is what there is.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _named(exc: OSError, path: str) -> OSError:
    """The failure as the user's file's error: the temporary name means nothing to them."""
    reason = exc.strerror or str(exc)
    return OSError(exc.errno, f"cannot be written ({reason}); a previous file of that name is left as it was",
                   str(path))


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], encoding: str = "utf-8") -> Iterator[IO[str]]:
    """A text stream whose contents replace ``path`` when the block ends without an exception.

    On any failure (an exception in the block, a full disk on write, flush or fsync) the
    temporary file is removed, ``path`` is untouched, and an OSError names ``path``.
    An existing file keeps its mode; a symbolic link is written through (module docstring).
    """
    path = os.fspath(path)
    target = _through_links(path)
    try:
        fd, temporary = _temporary_beside(target)
    except OSError as exc:
        raise _named(exc, path) from None
    try:
        with open(fd, "w", encoding=encoding) as stream:
            _keep_mode(stream.fileno(), target)
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise _named(exc, path) from None
        raise
    _sync_directory(os.path.dirname(target))
