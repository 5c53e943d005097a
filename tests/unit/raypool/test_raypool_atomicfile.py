"""The one atomic, durable file write of raypool, and every writer of raypool using it."""

from __future__ import annotations

import ast
import errno
import json
import os
import stat
from pathlib import Path

import pytest

from raypool import atomicfile, discovery, head, supervisor
from raypool.atomicfile import write_atomic
from raypool.config import load_node_settings
from raypool.headrecord import HeadRecord
from raypool.local.state import LocalCluster, LocalNode

RAYPOOL = Path(__file__).resolve().parents[3] / "raypool"


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_writes_text_and_bytes_with_the_mode(tmp_path):
    path = tmp_path / "f.json"
    write_atomic(str(path), "héllo\n")
    assert path.read_text(encoding="utf-8") == "héllo\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    write_atomic(str(path), b"\x00\x01" * 100_000, mode=0o600)
    assert path.read_bytes() == b"\x00\x01" * 100_000
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert listing(tmp_path) == ["f.json"]


def test_file_fsynced_before_the_rename_and_directory_after(tmp_path, monkeypatch):
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_atomic(str(tmp_path / "f"), "x")
    assert events == ["fsync file", "rename", "fsync dir"]


def short_writes_then(error: BaseException):
    """An ``os.write`` that writes 1000 bytes per call, then raises on the third call."""
    real_write = os.write
    calls = []

    def write(fd: int, data) -> int:
        calls.append(fd)
        if len(calls) == 3:
            raise error
        return real_write(fd, bytes(data[:1000]))

    return write


def raising(error: BaseException):
    def fail(*_args: object) -> None:
        raise error
    return fail


@pytest.mark.parametrize("name,fake,expected", [
    # the disk fills up half-way through
    ("write", short_writes_then(OSError(errno.ENOSPC, "full")), OSError),
    # Ctrl-C half-way through
    ("write", short_writes_then(KeyboardInterrupt()), KeyboardInterrupt),
    ("fsync", raising(OSError(errno.EIO, "I/O error")), OSError),
    ("replace", raising(OSError(errno.EXDEV, "cross-device")), OSError),
], ids=["disk-full", "interrupt", "fsync", "rename"])
def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch, name,
                                                             fake, expected):
    path = tmp_path / "head.json"
    write_atomic(str(path), "old\n")
    monkeypatch.setattr(os, name, fake)
    with pytest.raises(expected):
        write_atomic(str(path), "new content " * 1000)
    monkeypatch.undo()
    assert path.read_text() == "old\n"
    assert listing(tmp_path) == ["head.json"]


def test_short_writes_are_completed(tmp_path, monkeypatch):
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
    write_atomic(str(tmp_path / "f"), "0123456789" * 50)
    assert (tmp_path / "f").read_text() == "0123456789" * 50


def test_the_directory_must_exist(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomic(str(tmp_path / "missing" / "f"), "x")


# --- every writer of raypool goes through it ----------------------------------------------

def _settings(tmp_path: Path):
    return load_node_settings({
        "ARGUS_ROLE": "head", "ARGUS_NODE_IP": "10.0.0.2", "ARGUS_NODE_NAME": "n",
        "ARGUS_SHARED_ROOT": str(tmp_path / "shared"), "ARGUS_RUN_DIR": str(tmp_path / "run")})


def _write_head_record(tmp_path: Path) -> Path:
    path = tmp_path / "shared" / "head.json"
    discovery.write_record(str(path), HeadRecord("argus-ray", "10.0.0.2", 6379, 8265, "u",
                                                 "g", 1, 0.0, 60.0, "h", 1))
    return path


def _write_generation(tmp_path: Path) -> Path:
    path = tmp_path / "head.generation.json"
    head.write_generation(str(path), "g1", 5.0)
    assert json.loads(path.read_text()) == {"generation": "g1", "started_at": 5.0}
    return path


def _write_supervisord_config(tmp_path: Path) -> Path:
    return Path(supervisor.write_config(_settings(tmp_path)))


def _save_local_state(tmp_path: Path) -> Path:
    env = {"ARGUS_ROLE": "worker", "ARGUS_NODE_IP": "10.0.0.3",
           "ARGUS_RUN_DIR": str(tmp_path / "w1")}
    cluster = LocalCluster(str(tmp_path), "ports", "ab12", "/tmp/x", str(tmp_path / "h.json"),
                           nodes=[LocalNode("w1", "worker", "10.0.0.3", env)])
    cluster.save()
    return Path(cluster.state_file)


@pytest.mark.parametrize("writer", [
    _write_head_record, _write_generation, _write_supervisord_config, _save_local_state,
])
def test_every_raypool_writer_is_atomic_and_durable(tmp_path, monkeypatch, writer):
    calls = []
    real = atomicfile.write_atomic

    def spy(path: str, data: str | bytes, **kw: int) -> None:
        calls.append(path)
        real(path, data, **kw)

    for module in ("raypool.discovery", "raypool.head", "raypool.supervisor",
                   "raypool.local.state"):
        monkeypatch.setattr(f"{module}.write_atomic", spy)
    path = writer(tmp_path)
    assert calls == [str(path)]
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_no_other_module_of_raypool_renames_files():
    """A second hand-rolled "write temp, rename" would skip the fsyncs again."""
    offenders = []
    for path in sorted(RAYPOOL.glob("*.py")):
        if path.name == "atomicfile.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("replace", "rename") \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
