"""The one way the service touches a file under the shared root, where users' jobs write.

A job runs its user's code on the workers, and that code can put anything in its
owner's tree (``<shared_root>/users/<user>/``): symlinks to ``/proc/self/environ`` or to
another user's log, FIFOs, huge or binary files, a directory swapped for a link between
two of the service's steps. The service holds secrets and reads every user's tree, so
it must never follow what a job planted. :class:`SharedTree` opens every path component
without following a symlink, from a descriptor of the root, and refuses what is not the
kind expected:

* ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` opens a
  whole path in one call where the kernel has it (Linux 5.6+, and not refused by a
  seccomp profile); elsewhere a walk opens one component at a time with
  ``O_NOFOLLOW | O_DIRECTORY`` from the parent's descriptor. Either way a symlink in any
  component, ``..``, or a path outside the root is :class:`UnsafePath`, and a directory
  swapped for a link after it was opened changes nothing (every later step goes through
  the descriptor).
* A file read must be a regular file with one name (a hard link to someone else's file
  is refused), opened ``O_NONBLOCK`` (a FIFO never blocks the service), and is read up
  to a cap: never more bytes than the caller allows.
* Directories are made with ``mkdirat`` under an opened parent, files are made under a
  temporary name with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and renamed over the target
  inside the same directory descriptor: nothing is ever written through a link, so
  nothing lands outside the root.

The root itself is the operator's (``ray.shared_root``, maybe a symlink to a mount): it is
opened normally. ``tests/unit/project/test_shared_root_access.py`` fails on any code that
opens, lists, creates or removes a path under the shared root another way.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import posixpath
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass

# linux/openat2.h
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
# openat2's number in the generic syscall table (x86_64 and arm64 both use it)
_SYS_OPENAT2 = 437
# errnos that mean "a component is a link, or not a directory, or leaves the root"
_UNSAFE_ERRNOS = (errno.ELOOP, errno.ENOTDIR, errno.EXDEV, errno.ENXIO)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path under the shared root that the service will not touch: a symlink in it, a
    component that is not a directory, a file that is not a regular file with one name,
    or a path that leaves the root. The message names the path, never its content."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


class _Openat2:
    """``openat2(2)`` through libc's ``syscall``; ``usable`` is False where the kernel or
    a seccomp profile refuses it (then :class:`SharedTree` walks instead)."""

    def __init__(self) -> None:
        self._syscall = None
        if sys.platform.startswith("linux") and platform.machine() in (
                "x86_64", "aarch64", "arm64"):
            with contextlib.suppress(OSError, AttributeError):
                syscall = ctypes.CDLL(None, use_errno=True).syscall
                syscall.restype = ctypes.c_long
                self._syscall = syscall
        self.usable = self._syscall is not None and self._probe()

    def _probe(self) -> bool:
        root = os.open("/", _DIR_FLAGS)
        try:
            os.close(self.open(root, ".", _DIR_FLAGS))
        except OSError:
            return False
        finally:
            os.close(root)
        return True

    def open(self, dir_fd: int, path: str, flags: int, mode: int = 0) -> int:
        """A descriptor of ``path`` beneath ``dir_fd``, no link followed (``mode`` only
        with ``O_CREAT``: openat2 refuses one otherwise)."""
        assert self._syscall is not None
        how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, _RESOLVE)
        fd = self._syscall(_SYS_OPENAT2, ctypes.c_int(dir_fd),
                           ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                           ctypes.c_size_t(ctypes.sizeof(how)))
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return int(fd)


_OPENAT2 = _Openat2()


@dataclass(frozen=True)
class Read:
    """What :meth:`SharedTree.read` got: at most the cap's bytes, and whether the file
    held more."""

    data: bytes
    truncated: bool


class SharedTree:
    """Files under ``root`` touched without following anything in it (see the module
    doc). Paths are absolute paths under the root (as ``service.domain.layout`` builds
    them) or paths relative to it; anything else is :class:`UnsafePath`.

    ``use_openat2=False`` forces the component walk (tests run both)."""

    def __init__(self, root: str | os.PathLike[str], *, use_openat2: bool | None = None
                 ) -> None:
        self.root = posixpath.normpath(os.fspath(root))
        self._openat2 = _OPENAT2.usable if use_openat2 is None else (
            use_openat2 and _OPENAT2.usable)

    # -- paths ---------------------------------------------------------------------------
    def parts(self, path: str | os.PathLike[str]) -> tuple[str, ...]:
        """The components of ``path`` below the root; UnsafePath when it is not beneath
        it or names ``.``/``..`` (nothing is normalized away: a path is taken as given)."""
        text = os.fspath(path)
        if posixpath.isabs(text):
            prefix = self.root.rstrip("/") + "/"
            if not text.startswith(prefix):
                raise UnsafePath(errno.EXDEV, "not under the shared root", text)
            text = text[len(prefix):]
        parts = tuple(text.split("/"))
        if not text or any(p in ("", ".", "..") for p in parts):
            raise UnsafePath(errno.EINVAL, "not a plain path under the shared root",
                             os.fspath(path))
        return parts

    # -- descriptors ---------------------------------------------------------------------
    def _root_fd(self) -> int:
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def _open_dir(self, parts: tuple[str, ...], create: bool) -> int:
        """A descriptor of the directory ``parts`` (made, 0755, when ``create``; so is a
        missing root, the operator's own path); every descriptor opened on the way is
        closed exactly once."""
        if create:
            os.makedirs(self.root, exist_ok=True)
        fd = self._root_fd()
        if parts and self._openat2 and not create:
            try:
                with _guarded(parts):
                    return _OPENAT2.open(fd, "/".join(parts), _DIR_FLAGS)
            finally:
                os.close(fd)
        try:
            for i, part in enumerate(parts):
                with _guarded(parts[:i + 1]):
                    child = _step(fd, part, create)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _dir(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        fd = self._open_dir(parts, create)
        try:
            yield fd
        finally:
            os.close(fd)

    def _open_file(self, parts: tuple[str, ...], flags: int) -> int:
        if self._openat2:
            root = self._root_fd()
            try:
                with _guarded(parts):
                    return _OPENAT2.open(root, "/".join(parts), flags | os.O_NOFOLLOW)
            finally:
                os.close(root)
        with self._dir(parts[:-1]) as parent, _guarded(parts):
            return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=parent)

    # -- reads ---------------------------------------------------------------------------
    def read(self, path: str | os.PathLike[str], limit: int, *, tail: bool = False
             ) -> Read:
        """At most ``limit`` bytes of the regular file at ``path`` (its last ones with
        ``tail``): FileNotFoundError when there is none, UnsafePath for anything else
        than a regular file with one name."""
        parts = self.parts(path)
        fd = self._open_file(parts, _READ_FLAGS)
        try:
            size = _regular(fd, parts)
            skipped = tail and size > limit
            if skipped:
                os.lseek(fd, size - limit, os.SEEK_SET)
            chunks, left = [], limit + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        return Read(data[:limit], skipped or len(data) > limit)

    def is_dir(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` is a directory reached without a link (False for anything
        else, including a missing or unsafe path)."""
        try:
            with self._dir(self.parts(path)):
                return True
        except OSError:
            return False

    # -- writes --------------------------------------------------------------------------
    def makedirs(self, path: str | os.PathLike[str]) -> None:
        """Make the directory ``path`` and its parents (0755), none through a link."""
        with self._dir(self.parts(path), create=True):
            pass

    def write_atomic(self, path: str | os.PathLike[str], data: str | bytes, *,
                     mode: int = 0o644) -> None:
        """Replace the file at ``path`` with ``data`` in one step: a new file under a
        temporary name (``O_EXCL | O_NOFOLLOW``), fsynced, renamed over the target within
        the same directory descriptor. Parent directories are made as needed."""
        parts = self.parts(path)
        payload = data.encode("utf-8", "replace") if isinstance(data, str) else data
        with self._dir(parts[:-1], create=True) as parent:
            name = parts[-1]
            tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
            with _guarded(parts):
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=parent)
            try:
                try:
                    view = memoryview(payload)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
                os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent)
                raise

    def create_once(self, path: str | os.PathLike[str], data: str) -> bool:
        """Write ``data`` to a new file at ``path`` unless something is there already
        (False then); the parent is made as needed."""
        parts = self.parts(path)
        with self._dir(parts[:-1], create=True) as parent:
            try:
                os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
                return False
            except FileNotFoundError:
                pass
        self.write_atomic(path, data)
        return True

    def open_lock(self, path: str | os.PathLike[str]) -> int:
        """A descriptor of the existing regular file at ``path``, open for appending (NFS
        emulates ``flock`` with write locks, which need a file open for writing); the
        caller closes it."""
        parts = self.parts(path)
        fd = self._open_file(parts, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOCTTY
                             | os.O_CLOEXEC)
        try:
            _regular(fd, parts)
        except BaseException:
            os.close(fd)
            raise
        return fd


def _step(dir_fd: int, part: str, create: bool) -> int:
    """Open the directory ``part`` under ``dir_fd`` without following it (made first when
    ``create`` and it is missing)."""
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
        os.mkdir(part, 0o755, dir_fd=dir_fd)
    return os.open(part, _DIR_FLAGS, dir_fd=dir_fd)


@contextlib.contextmanager
def _guarded(parts: tuple[str, ...]) -> Iterator[None]:
    """An errno meaning "a link, or not a directory, or outside the root" becomes
    UnsafePath naming the caller's own path (never what a link points to)."""
    try:
        yield
    except UnsafePath:
        raise
    except OSError as exc:
        if exc.errno in _UNSAFE_ERRNOS:
            raise UnsafePath(exc.errno, "a symlink or not the expected kind of file",
                             "/".join(parts)) from None
        raise


def _regular(fd: int, parts: tuple[str, ...]) -> int:
    """The size of the regular file open at ``fd``; UnsafePath for anything else."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(errno.EINVAL, "not a regular file", "/".join(parts))
    if st.st_nlink != 1:
        raise UnsafePath(errno.EMLINK, "a file with other names (a hard link)",
                         "/".join(parts))
    return st.st_size
