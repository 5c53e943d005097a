from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.engine.artifacts import Artifacts

SID = "mvp2-alice-ppo-20251223-143201-7f3a--a01"
OLD_SID = "mvp2-ppo-20251223-143201-7f3a--a01"


def test_submission_files_land_in_the_owners_tree(tmp_path: Path) -> None:
    art = Artifacts(tmp_path)
    payload = {"submission_id": SID, "entrypoint": "python3 -m x", "argv": ["python3", "-m", "x"]}
    art.write_submission(SID, "alice", "workload: ppo\n# raw, kept as sent\n", payload)
    d = tmp_path / "users" / "alice" / "jobs" / SID
    assert art.attempt_dir(SID, "alice") == d
    assert (d / "jobspec.yaml").read_text() == "workload: ppo\n# raw, kept as sent\n"
    assert json.loads((d / "submit.json").read_text()) == payload
    assert art.read_submission(SID, "alice") == payload
    assert sorted(p.name for p in d.iterdir()) == ["jobspec.yaml", "submit.json"]  # no temp
    assert art.read_submission(SID, "bob") is None  # another user's tree is another place


def test_log_archive_round_trip_and_overwrite(tmp_path: Path) -> None:
    art = Artifacts(tmp_path)
    assert art.read_log(SID, "alice") is None
    art.archive_log(SID, "alice", "first\n")
    art.archive_log(SID, "alice", "line ünicode\n")
    assert art.read_log(SID, "alice") == "line ünicode\n"


def test_the_common_area_is_never_read_for_an_owned_attempt(tmp_path: Path) -> None:
    """Before users, attempts lived in ``<root>/jobs/<sid>/``: a place outside every
    user's tree, which anyone could write. An owned attempt's log, record and exit marker
    are read from its owner's tree only (docs/security.md, the migration note)."""
    old = tmp_path / "jobs" / OLD_SID
    old.mkdir(parents=True)
    (old / "driver.log").write_text("old log\n")
    (old / "submit.json").write_text('{"submission_id": "x"}')
    (old / "exit_code").write_text("0\n")
    art = Artifacts(tmp_path)
    assert art.read_log(OLD_SID, "admin") is None
    assert art.read_submission(OLD_SID, "admin") is None
    assert art.read_exit_code(OLD_SID, "admin") is None
    art.archive_log(OLD_SID, "admin", "archived after the upgrade\n")
    assert art.read_log(OLD_SID, "admin") == "archived after the upgrade\n"
    assert art.attempt_dir(OLD_SID, None) == old  # no owner: the legacy place is its own
    assert art.read_log(OLD_SID, None) == "old log\n"


@pytest.mark.parametrize("sid", ["../../etc", "x/../../y", "mvp2-ppo-20251223-143201-7f3a",
                                 ""])
def test_rejects_non_argus_ids(tmp_path: Path, sid: str) -> None:
    art = Artifacts(tmp_path)
    with pytest.raises(ValueError, match="submission id"):
        art.archive_log(sid, "alice", "x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("user", ["..", "../bob", "Alice", "a/b", "", "all"])
def test_rejects_non_user_names(tmp_path: Path, user: str) -> None:
    art = Artifacts(tmp_path)
    with pytest.raises(ValueError, match="user name"):
        art.archive_log(SID, user, "x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text,code", [("0\n", 0), ("137\n", 137), ("255", 255), ("", None),
                                       ("x", None), ("256\n", None), ("-1\n", None),
                                       ("0\n0\n", None), (" 0", None), ("1" * 40, None)])
def test_exit_marker_read_as_the_drivers_exit_code(tmp_path: Path, text: str, code) -> None:
    art = Artifacts(tmp_path)
    sid = "mvp2-alice-ppo-20251223-143201-7f3a--a01"
    assert art.read_exit_code(sid, "alice") is None  # the driver has not ended
    art.attempt_dir(sid, "alice").mkdir(parents=True)
    (art.attempt_dir(sid, "alice") / "exit_code").write_text(text)
    assert art.read_exit_code(sid, "alice") == code


def test_a_task_lock_is_held_only_while_someone_holds_it(tmp_path: Path) -> None:
    import fcntl

    artifacts = Artifacts(tmp_path)
    task = "mvp2-alice-ppo-20251223-143201-7f3a"
    path = artifacts.task_lock(task, "alice")
    assert path == tmp_path / "users" / "alice" / "locks" / f"{task}.lock"
    assert not artifacts.task_lock_held(task, "alice")  # no file: an attempt from before
    path.parent.mkdir(parents=True)
    with path.open("a") as fh:
        assert not artifacts.task_lock_held(task, "alice")
        fcntl.flock(fh, fcntl.LOCK_SH)  # any holder counts, as the driver's shell's
        assert artifacts.task_lock_held(task, "alice")
        assert artifacts.task_lock_held(task, "alice")  # asking leaves it as it is
    assert not artifacts.task_lock_held(task, "alice")
