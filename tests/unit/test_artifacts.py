from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.artifacts import Artifacts

SID = "mvp2-ppo-20251223-143201-7f3a--a01"


def test_submission_files(tmp_path: Path) -> None:
    art = Artifacts(tmp_path / "jobs")
    payload = {"submission_id": SID, "entrypoint": "python3 -m x", "argv": ["python3", "-m", "x"]}
    art.write_submission(SID, "workload: ppo\n# raw, kept as sent\n", payload)
    d = tmp_path / "jobs" / SID
    assert (d / "jobspec.yaml").read_text() == "workload: ppo\n# raw, kept as sent\n"
    assert json.loads((d / "submit.json").read_text()) == payload
    assert art.read_submission(SID) == payload
    assert sorted(p.name for p in d.iterdir()) == ["jobspec.yaml", "submit.json"]  # no temp


def test_log_archive_round_trip_and_overwrite(tmp_path: Path) -> None:
    art = Artifacts(tmp_path)
    assert art.read_log(SID) is None
    art.archive_log(SID, "first\n")
    art.archive_log(SID, "line ünicode\n")
    assert art.read_log(SID) == "line ünicode\n"


@pytest.mark.parametrize("sid", ["../../etc", "x/../../y", "mvp2-ppo-20251223-143201-7f3a",
                                 ""])
def test_rejects_non_argus_ids(tmp_path: Path, sid: str) -> None:
    art = Artifacts(tmp_path)
    with pytest.raises(ValueError, match="submission id"):
        art.archive_log(sid, "x")
    assert list(tmp_path.iterdir()) == []
