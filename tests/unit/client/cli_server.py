"""The harness shared by the tests of this folder (``test_cli.py`` and its siblings):
constants, builders and helpers; the fixtures are in ``conftest.py``."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

from argus_client.cli import main as cli
from service.cluster.fake import FakeCluster
from service.config import Settings
from service.domain.states import RayStatus
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.store.writer import Store

TOKEN = "cli-token"


T0 = 1_766_000_000.0


class Server:
    def __init__(self, tmp_path: Path) -> None:
        self.shared = tmp_path / "shared"
        self.settings = Settings(shared_root=str(self.shared))
        self.store = Store(str(tmp_path / "db.sqlite3"))
        self.cluster = FakeCluster(clock=T0)
        self.cluster.add_node("n1", gpus=4)
        self.artifacts = Artifacts(self.settings.shared_root)
        self.scheduler = Scheduler(self.store, self.cluster, self.settings, self.artifacts)
        self.now = T0
        self.url = ""

    def tick(self) -> None:
        self.now += 1
        self.cluster.clock = self.now
        self.scheduler.tick(self.now)

    def spec_file(self, tmp_path: Path, **fields: Any) -> Path:
        doc = {
            "workload": "sft", "code_path": f"{self.shared}/code", "model_id": "org/model",
            "train_file": f"{self.shared}/train.parquet", "val_file": "null", "nnodes": 1,
            "n_gpus_per_node": 2, **fields,
        }
        path = tmp_path / "job.yaml"
        path.write_text("".join(f"{k}: {v}\n" for k, v in doc.items()))
        return path


async def run(srv: Server, *argv: str, **kw: Any) -> tuple[int, str]:
    out = io.StringIO()
    code = await asyncio.to_thread(cli.main, ["--url", srv.url, *argv], out=out, **kw)
    return code, out.getvalue()


async def submitted(srv: Server, tmp_path: Path, **fields: Any) -> str:
    code, out = await run(srv, "--json", "submit", str(srv.spec_file(tmp_path, **fields)))
    assert code == 0, out
    return json.loads(out)["task_id"]


class Terminal(io.StringIO):
    """A stdout (or stderr) that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Driver:
    """An injected ``sleep`` that moves the fake world on instead of waiting: each call
    ends every job on the cluster with ``outcome`` and ticks the scheduler; ``clock`` is
    the matching clock (the slept seconds added up)."""

    def __init__(self, srv: Server, outcome: RayStatus = RayStatus.SUCCEEDED) -> None:
        self.srv = srv
        self.outcome = outcome
        self.now = 0.0
        self.calls = 0

    def __call__(self, seconds: float) -> None:
        self.calls += 1
        self.now += seconds
        for sid, job in self.srv.cluster.jobs.items():
            if not job.status.is_terminal():
                self.srv.cluster.finish(sid, self.outcome, message="Traceback: boom")
        self.srv.tick()

    def clock(self) -> float:
        return self.now
