"""Writing a user's file so that a failure never costs them the previous one.

A recording written in place is lost when the disk fills or the process
dies half way: the old file is already truncated and the new one is
unparseable. :func:`atomic_writer` writes a temporary file next to the
target (the same file system, so the rename is atomic), syncs it to disk and
renames it over the target only once everything is written.

Standard library only, nothing imported at module level but ``os``: ``pyamx
run --stats-file`` uses it and starts without paying for imports.
"""

from __future__ import annotations

import contextlib
import os


def _temporary_beside(path: str):
    """``(fd, name)`` of a new file next to ``path``; mode 0666 less the umask, as ``open(path, "w")`` gives."""
    directory, base = os.path.split(os.path.abspath(path))
    for attempt in range(100):
        name = os.path.join(directory, f".{base}.{os.getpid()}.{attempt}.tmp")
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), name
        except FileExistsError:  # a leftover of a killed writer with our pid: take the next name
            continue
    raise FileExistsError(f"no free temporary name next to {path}")


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
def atomic_writer(path, encoding: str = "utf-8"):
    """A text stream whose contents replace ``path`` when the block ends without an exception.

    On any failure (an exception in the block, a full disk on write, flush or fsync) the
    temporary file is removed, ``path`` is untouched, and an OSError names ``path``.
    """
    path = os.fspath(path)
    try:
        fd, temporary = _temporary_beside(path)
    except OSError as exc:
        raise _named(exc, path) from None
    try:
        with open(fd, "w", encoding=encoding) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise _named(exc, path) from None
        raise
    _sync_directory(os.path.dirname(os.path.abspath(path)))
