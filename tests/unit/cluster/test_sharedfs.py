"""``SharedTree``: what a job can plant in its owner's tree is never followed, read whole,
or written through; both ways of opening (openat2, and the component walk) alike."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from service.cluster.sharedfs import _OPENAT2, SharedTree, UnsafePath

WAYS = [pytest.param(False, id="walk"),
        pytest.param(True, id="openat2", marks=pytest.mark.skipif(
            not _OPENAT2.usable, reason="this kernel refuses openat2"))]


@pytest.fixture(params=WAYS)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[SharedTree, Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "users" / "bob" / "jobs").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("alice's bytes")
    return SharedTree(root, use_openat2=request.param), root, outside


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_regular_file_is_read_up_to_the_cap(world) -> None:
    tree, root, _ = world
    (root / "users" / "bob" / "f").write_bytes(b"0123456789")
    assert tree.read(root / "users" / "bob" / "f", 100).data == b"0123456789"
    got = tree.read("users/bob/f", 4)
    assert (got.data, got.truncated) == (b"0123", True)
    tail = tree.read("users/bob/f", 3, tail=True)
    assert (tail.data, tail.truncated) == (b"789", True)
    assert tree.read("users/bob/f", 10).truncated is False
    with pytest.raises(FileNotFoundError):
        tree.read("users/bob/missing", 10)


@pytest.mark.parametrize("plant", ["final", "middle", "dangling", "proc"])
def test_no_symlink_is_followed_anywhere_in_a_path(world, plant: str) -> None:
    tree, root, outside = world
    bob = root / "users" / "bob"
    before = open_fds()
    if plant == "final":
        (bob / "driver.log").symlink_to(outside / "secret")
        path = bob / "driver.log"
    elif plant == "middle":
        (bob / "jobs").rmdir()
        (bob / "jobs").symlink_to(outside)
        path = bob / "jobs" / "secret"
    elif plant == "dangling":
        (bob / "driver.log").symlink_to(outside / "nothing")
        path = bob / "driver.log"
    else:
        (bob / "driver.log").symlink_to("/proc/self/environ")
        path = bob / "driver.log"
    with pytest.raises(UnsafePath) as caught:
        tree.read(path, 1000)
    assert "alice" not in str(caught.value) and "environ" not in str(caught.value)
    assert open_fds() == before


def test_fifos_devices_directories_and_hard_links_are_not_regular_files(world) -> None:
    tree, root, outside = world
    bob = root / "users" / "bob"
    os.mkfifo(bob / "fifo")  # opened without blocking, then refused
    with pytest.raises(UnsafePath, match="not a regular file"):
        tree.read(bob / "fifo", 10)
    with pytest.raises(UnsafePath, match="not a regular file"):
        tree.read(bob / "jobs", 10)
    try:
        os.link(outside / "secret", bob / "linked")
    except OSError as exc:  # a kernel that protects hard links from this user
        pytest.skip(f"no hard link here: {exc}")
    with pytest.raises(UnsafePath, match="hard link"):
        tree.read(bob / "linked", 100)


@pytest.mark.parametrize("path", ["/etc/passwd", "users/../../outside/secret",
                                  "users/./bob", "users//bob", "", "/"])
def test_paths_that_leave_the_root_or_are_not_plain_are_refused(world, path: str) -> None:
    tree, _, _ = world
    with pytest.raises(UnsafePath):
        tree.read(path, 10)


def test_writes_never_go_through_a_link(world) -> None:
    tree, root, outside = world
    bob = root / "users" / "bob"
    (bob / "jobs").rmdir()
    (bob / "jobs").symlink_to(outside)
    with pytest.raises(UnsafePath):
        tree.write_atomic(bob / "jobs" / "sid" / "submit.json", "{}")
    with pytest.raises(UnsafePath):
        tree.makedirs(bob / "jobs" / "sid")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    # a link at the final name is replaced, not written through
    (bob / "driver.log").symlink_to(outside / "secret")
    tree.write_atomic(bob / "driver.log", "the archive")
    assert (outside / "secret").read_text() == "alice's bytes"
    assert not (bob / "driver.log").is_symlink()
    assert (bob / "driver.log").read_text() == "the archive"
    assert sorted(p.name for p in bob.iterdir()) == ["driver.log", "jobs"]  # no temp left


def test_directories_are_made_as_needed_and_tested_without_links(world) -> None:
    tree, root, outside = world
    tree.write_atomic(root / "users" / "carol" / "jobs" / "s" / "f", b"x")
    assert (root / "users" / "carol" / "jobs" / "s" / "f").read_bytes() == b"x"
    assert tree.is_dir(root / "users" / "carol" / "jobs")
    (root / "users" / "bob" / "ckpt").symlink_to(outside)
    assert not tree.is_dir(root / "users" / "bob" / "ckpt")
    assert not tree.is_dir(root / "users" / "bob" / "nothing")
    assert tree.create_once(root / "users" / "bob" / "x.stop", "why") is True
    assert tree.create_once(root / "users" / "bob" / "x.stop", "again") is False
    assert (root / "users" / "bob" / "x.stop").read_text() == "why"


def test_a_missing_root_is_made_for_writes_and_is_absent_for_reads(tmp_path: Path) -> None:
    tree = SharedTree(tmp_path / "new-root")
    with pytest.raises(FileNotFoundError):
        tree.read("users/bob/f", 10)
    tree.write_atomic("users/bob/f", "x")
    assert tree.read("users/bob/f", 10).data == b"x"


def test_a_lock_opens_only_as_a_regular_file(world) -> None:
    tree, root, outside = world
    bob = root / "users" / "bob"
    (bob / "t.lock").write_text("")
    os.close(tree.open_lock(bob / "t.lock"))
    (bob / "l.lock").symlink_to(outside / "secret")
    with pytest.raises(UnsafePath):
        tree.open_lock(bob / "l.lock")
    os.mkfifo(bob / "f.lock")
    with pytest.raises(UnsafePath) as caught:  # no reader: ENXIO, never a blocked open
        tree.open_lock(bob / "f.lock")
    assert caught.value.errno in (errno.ENXIO, errno.EINVAL)
    assert (outside / "secret").read_text() == "alice's bytes"


def test_a_directory_swapped_for_a_link_after_it_was_opened_changes_nothing(
        tmp_path: Path) -> None:
    """The walk holds each directory by descriptor: swapping the path for a link to
    somewhere else once the walk is inside it cannot move the write there."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "users" / "bob" / "jobs").mkdir(parents=True)
    outside.mkdir()
    tree = SharedTree(root, use_openat2=False)
    with tree._dir(("users", "bob", "jobs")) as fd:
        (root / "users" / "bob" / "jobs").rename(root / "users" / "bob" / "moved")
        (root / "users" / "bob" / "jobs").symlink_to(outside)
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=fd))
    assert list(outside.iterdir()) == []
    assert (root / "users" / "bob" / "moved" / "f").exists()


def test_head_json_is_read_only_as_a_regular_file(tmp_path: Path) -> None:
    from service.cluster.address import read_file

    (tmp_path / "real").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.mkfifo(tmp_path / "fifo")
    assert read_file(str(tmp_path / "real"))[0] == "{}"
    with pytest.raises(OSError):
        read_file(str(tmp_path / "link"))
    with pytest.raises(OSError, match="not a regular file"):
        read_file(str(tmp_path / "fifo"))
