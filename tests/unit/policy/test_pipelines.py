"""Pipelines: the document (DAG, references), the derived state, and a whole pipeline
through the store and real scheduler ticks on the fake cluster (injected clock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cluster.fake import FakeCluster
from service.cluster.sharedfs import SharedTree
from service.config import Settings
from service.domain.newtask import NewTask
from service.domain.states import PipelineState, RayStatus, TaskState
from service.engine.artifacts import Artifacts
from service.engine.checkpoints import NoCheckpoint, latest_checkpoint
from service.engine.scheduler import Scheduler
from service.policy.pipelines import PipelineError, derive_state, parse_pipeline
from service.store.pipelines import DependencyError
from service.store.writer import Store
from service.usecases.pipeline_submit import submit_pipeline

S = TaskState
T0 = 1_766_500_000.0


def _spec(root: Path, workload: str = "ppo", model: str = "org/model") -> str:
    val = f"{root}/val.parquet"
    return (f"{{workload: {workload}, code_path: {root}/verl, model_id: '{model}', "
            f"train_file: {root}/train.parquet, val_file: {val}, nnodes: 1, "
            f"n_gpus_per_node: 4}}")


def _doc(root: Path, eval_after: str = "any") -> str:
    return f"""
name: sft-ppo-eval
stages:
  sft:
    jobspec: {_spec(root, "sft")}
  ppo:
    after: {{ok: [sft]}}
    jobspec: {_spec(root, "ppo", "{{stages.sft.latest_checkpoint}}")}
  eval:
    after: {{{eval_after}: [ppo]}}
    jobspec: {_spec(root, "ppo", "{{ stages.ppo.checkpoint_dir }}")}
"""


@pytest.mark.parametrize(("text", "field", "message"), [
    ("stages: {a: {jobspec: {}, after: {ok: [b]}}, b: {jobspec: {}, after: {ok: [a]}}}\n"
     "name: x", "stages", "the stages' after form a cycle: a, b"),
    ("name: x\nstages: {a: {jobspec: {}, after: {ok: [a]}}}", "stages.a.after",
     "a stage cannot depend on itself"),
    ("name: x\nstages: {a: {jobspec: {}, after: {ok: [zz]}}}", "stages.a.after",
     "ok: 'zz' is not a valid reference"),
    ("name: x\nstages: {a: {jobspec: {}}, b: {jobspec: {model_id: '{{stages.a.weights}}'},"
     " after: {ok: [a]}}}", "stages.b.jobspec", "unknown output 'weights' of stage a"),
    ("name: x\nstages: {a: {jobspec: {}}, b: {jobspec: {model_id: '{{stages.a.job_dir}}'}}}",
     "stages.b.jobspec", "refers to stage a, which is not one of its ancestors"),
    ("name: x\nstages: {a: {jobspec: {after: {ok: []}}}}", "stages.a.jobspec.after",
     "set it on the stage, not in its JobSpec"),
    ("name: x\nstages: {}", "stages", "must be a non-empty mapping"),
    ("- 1", "body", "must be a mapping"),
])
def test_bad_documents_name_the_problem(text: str, field: str, message: str) -> None:
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text)
    assert any(d["field"] == field and message in d["message"] for d in info.value.details), (
        info.value.details)


def test_parents_come_first_and_refs_are_found(tmp_path: Path) -> None:
    doc = parse_pipeline(_doc(tmp_path))
    assert [s.name for s in doc.stages] == ["sft", "ppo", "eval"]
    assert doc.stages[1].refs == {("sft", "latest_checkpoint")}


@pytest.mark.parametrize(("stages", "cancel", "state"), [
    ([(S.SUCCEEDED, False), (S.RUNNING, False)], False, PipelineState.RUNNING),
    ([(S.SUCCEEDED, False), (S.BLOCKED, False)], True, PipelineState.RUNNING),
    ([(S.SUCCEEDED, False), (S.SUCCEEDED, False)], False, PipelineState.SUCCEEDED),
    ([(S.SUCCEEDED, False), (S.CANCELED, True)], False, PipelineState.SUCCEEDED),
    ([(S.FAILED, False), (S.CANCELED, True), (S.SUCCEEDED, False)], False,
     PipelineState.FAILED),
    ([(S.SUCCEEDED, False), (S.CANCELED, False)], False, PipelineState.CANCELED),
    ([(S.FAILED, False), (S.CANCELED, False)], True, PipelineState.CANCELED),
])
def test_derive_state(stages: list[tuple[TaskState, bool]], cancel: bool,
                      state: PipelineState) -> None:
    assert derive_state(stages, cancel) is state


def test_latest_checkpoint_follows_verls_tracker(tmp_path: Path) -> None:
    tree = SharedTree(tmp_path)
    with pytest.raises(NoCheckpoint, match=r"no latest_checkpointed_iteration\.txt"):
        latest_checkpoint(tree, str(tmp_path))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    with pytest.raises(NoCheckpoint, match="not a directory"):
        latest_checkpoint(tree, str(tmp_path))
    (tmp_path / "global_step_3").mkdir()
    assert latest_checkpoint(tree, str(tmp_path)) == f"{tmp_path}/global_step_3"


class Env:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.settings = Settings(shared_root=str(root))
        self.store = Store(str(root / "db.sqlite3"))
        self.cluster = FakeCluster(clock=T0)
        self.cluster.add_node("head", gpus=0, cpus=0, worker_slots=0)
        self.cluster.add_node("w1", gpus=4, cpus=16)
        self.sched = Scheduler(self.store, self.cluster, self.settings,
                               Artifacts(self.settings.shared_root))

    def tick(self, now: float) -> None:
        self.cluster.clock = now
        self.sched.tick(now)

    def state(self, task_id: str) -> TaskState:
        return self.store.tasks.get_task(task_id).state

    def run_to_end(self, task_id: str, now: float, status: RayStatus) -> None:
        sid = f"{task_id}--a01"
        self.cluster.start(sid, {"w1": 4})
        self.cluster.finish(sid, status, exit_code=0 if status is RayStatus.SUCCEEDED else 1)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    e = Env(tmp_path)
    yield e
    e.store.close()


def _ckpt(env: Env, task_id: str, step: int) -> str:
    root = env.root / "users" / "alice" / "checkpoints" / task_id
    (root / f"global_step_{step}").mkdir(parents=True)
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return f"{root}/global_step_{step}"


def test_sft_ppo_eval_runs_in_order_and_eval_runs_after_a_failed_ppo(env: Env) -> None:
    text = _doc(env.root)
    pid, ids = submit_pipeline(env.store, parse_pipeline(text), text, env.settings, "alice",
                               T0)
    assert [env.state(ids[s]) for s in ("sft", "ppo", "eval")] == [S.QUEUED, S.BLOCKED,
                                                                   S.BLOCKED]
    env.tick(T0)
    assert env.state(ids["sft"]) is S.SUBMITTED and env.state(ids["ppo"]) is S.BLOCKED
    step = _ckpt(env, ids["sft"], 7)
    env.run_to_end(ids["sft"], T0 + 1, RayStatus.SUCCEEDED)
    env.tick(T0 + 2)  # sft ends in the reconcile; ppo is released AND submitted this tick
    assert env.state(ids["sft"]) is S.SUCCEEDED
    assert env.state(ids["ppo"]) is S.SUBMITTED
    claim_spec = env.store.attempts.get_attempt(ids["ppo"]).ray_submission_id
    assert claim_spec == f"{ids['ppo']}--a01"
    events = [e for e in env.store.tasks.events(ids["ppo"]) if e.event_type == "STATE_TRANSITION"]
    assert events[0].payload["resolved"]["model_id"] == step
    env.run_to_end(ids["ppo"], T0 + 3, RayStatus.FAILED)
    env.tick(T0 + 4)
    assert env.state(ids["ppo"]) is S.FAILED and env.state(ids["eval"]) is S.SUBMITTED
    assert env.store.pipelines.get_pipeline(pid).pipeline.state is PipelineState.RUNNING
    env.run_to_end(ids["eval"], T0 + 5, RayStatus.SUCCEEDED)
    env.tick(T0 + 6)
    view = env.store.pipelines.get_pipeline(pid)
    assert view.pipeline.state is PipelineState.FAILED
    assert [(e.parent, e.child, e.condition.value) for e in view.edges] == [
        ("sft", "ppo", "ok"), ("ppo", "eval", "any")]
    ended = [e for e in env.store.tasks.events(ids["sft"]) if e.event_type == "PIPELINE_ENDED"]
    assert ended[0].payload["pipeline_id"] == pid and ended[0].payload["state"] == "FAILED"


def test_a_pipelines_end_reaches_its_owners_webhook(env: Env) -> None:
    """PIPELINE_ENDED is an ordinary event: the outbox gives alice's hook that subscribed to
    pipeline.ended one delivery in the transaction that ends the pipeline."""
    from service.domain.users import Role

    env.store.users.create_user("alice", Role.USER, T0)
    hook = env.store.webhooks.create_webhook(owner="alice", url="https://example.org/h",
                                             events=["pipeline.ended"], fmt="standard", now=T0,
                                             max_per_user=10)
    text = _doc(env.root)
    pid, ids = submit_pipeline(env.store, parse_pipeline(text), text, env.settings, "alice",
                               T0)
    env.store.pipelines.flag_pipeline_cancel(pid, T0 + 1)  # as the API's cancel does
    for stage in ("eval", "ppo", "sft"):
        env.store.tasks.cancel(ids[stage], T0 + 1, "alice")
    assert env.store.webhooks.webhook_deliveries(hook.hook_id, 10) == []  # stages: not subscribed
    env.tick(T0 + 2)
    assert env.store.pipelines.get_pipeline(pid).pipeline.state is PipelineState.CANCELED
    [delivery] = env.store.webhooks.webhook_deliveries(hook.hook_id, 10)
    assert delivery.event_type == "pipeline.ended" and delivery.state == "PENDING"


def test_a_failed_parent_cancels_ok_dependents_naming_it(env: Env) -> None:
    text = _doc(env.root, eval_after="ok")
    pid, ids = submit_pipeline(env.store, parse_pipeline(text), text, env.settings, "alice",
                               T0)
    env.tick(T0)
    env.run_to_end(ids["sft"], T0 + 1, RayStatus.FAILED)
    env.tick(T0 + 2)
    ppo = env.store.tasks.get_task(ids["ppo"])
    assert ppo.state is S.CANCELED
    assert ppo.error_summary == (f"dependency never satisfied: {ids['sft']} ended FAILED "
                                 "(after ok)")
    env.tick(T0 + 3)  # eval's parent (ppo) is now final too
    assert env.state(ids["eval"]) is S.CANCELED
    assert env.store.pipelines.get_pipeline(pid).pipeline.state is PipelineState.FAILED


def test_a_missing_checkpoint_cancels_the_stage_saying_why(env: Env) -> None:
    text = _doc(env.root)
    _, ids = submit_pipeline(env.store, parse_pipeline(text), text, env.settings, "alice", T0)
    env.tick(T0)
    env.run_to_end(ids["sft"], T0 + 1, RayStatus.SUCCEEDED)
    env.tick(T0 + 2)
    ppo = env.store.tasks.get_task(ids["ppo"])
    assert ppo.state is S.CANCELED and "no latest_checkpointed_iteration.txt" in (
        ppo.error_summary)


def test_a_bad_stage_creates_nothing(env: Env) -> None:
    text = _doc(env.root).replace("n_gpus_per_node: 4}", "n_gpus_per_node: 0}", 1)
    with pytest.raises(PipelineError) as info:
        submit_pipeline(env.store, parse_pipeline(text), text, env.settings, "alice", T0)
    assert info.value.details[0]["field"] == "stages.sft.jobspec.n_gpus_per_node"
    assert env.store.tasks.list_tasks(limit=10)[0] == []
    assert env.store.pipelines.list_pipelines(None, 10) == []


def _task(env: Env, task_id: str, user: str, after: tuple = (), admin: bool = False) -> None:
    env.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                        n_gpus_per_node=4, user=user, created_at=T0,
                                        after=tuple(after), priority=0), task_id=task_id,
                                admin=admin)


def test_task_after_checks_parents_and_waits_with_a_reason(env: Env) -> None:
    a = "mvp2-alice-ppo-20251223-143201-0001"
    b = "mvp2-bob-ppo-20251223-143201-0002"
    _task(env, a, "alice")
    _task(env, b, "bob")
    with pytest.raises(DependencyError, match=f"task {b} not found"):
        _task(env, "mvp2-alice-ppo-20251223-143201-0003", "alice", (("ok", b),))
    _task(env, "mvp2-root-ppo-20251223-143201-0004", "root", (("ok", b),), admin=True)
    c = "mvp2-alice-ppo-20251223-143201-0005"
    _task(env, c, "alice", (("any", a),))
    assert env.state(c) is S.BLOCKED
    assert [d.parent_id for d in env.store.pipelines.deps_of(c)] == [a]
    # a BLOCKED task is not runnable: not in the queue, not a waiting task for quotas
    assert c not in [r.task_id for r in env.store.tasks.runnable(T0 + 10, 100)]
    assert env.store.tasks.cancel(c, T0 + 1).kind.value == "canceled"


def test_depth_limit(env: Env) -> None:
    from service.policy.dependencies import MAX_DEPTH
    prev = "mvp2-alice-ppo-20251223-143201-1000"
    _task(env, prev, "alice")
    for i in range(1, MAX_DEPTH + 1):
        cur = f"mvp2-alice-ppo-20251223-143201-{0x1000 + i:04x}"
        _task(env, cur, "alice", (("any", prev),))
        prev = cur
    with pytest.raises(DependencyError, match="over the limit"):
        _task(env, "mvp2-alice-ppo-20251223-143201-2000", "alice", (("any", prev),))


def test_wakeups_drive_the_tick_and_are_consumed(env: Env) -> None:
    """A dependent of a parent that already ended is released on the next tick; once
    handled, no wakeup is left, so later ticks read nothing (a parent running on has
    none)."""
    a, b = "mvp2-alice-ppo-20251223-143201-0a01", "mvp2-alice-ppo-20251223-143201-0a02"
    _task(env, a, "alice")
    env.store.tasks.cancel(a, T0)
    c = "mvp2-alice-ppo-20251223-143201-0a03"
    _task(env, c, "alice", (("notok", a),))
    _task(env, b, "alice")
    d = "mvp2-alice-ppo-20251223-143201-0a04"
    _task(env, d, "alice", (("ok", b),))
    assert [t.task_id for t in env.store.pipelines.woken()[1]] == [c]  # d's parent runs on
    env.tick(T0 + 1)
    assert env.state(c) is not S.BLOCKED and env.state(d) is S.BLOCKED
    assert env.store.pipelines.woken() == (None, [])


def test_wait_keeps_an_unsatisfiable_dependent_with_its_reason(env: Env) -> None:
    a = "mvp2-alice-ppo-20251223-143201-0b01"
    _task(env, a, "alice")
    c = "mvp2-alice-ppo-20251223-143201-0b02"
    env.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x",
                                        spec={"on_unsatisfiable": "wait"}, nnodes=1,
                                        n_gpus_per_node=4, user="alice", created_at=T0,
                                        after=tuple((("ok", a),)), priority=0), task_id=c)
    env.store.tasks.cancel(a, T0)
    env.tick(T0 + 1)
    env.tick(T0 + 2)
    assert env.state(c) is S.BLOCKED
    assert env.store.pipelines.on_unsatisfiable_of(c) == "wait"
    from service.policy.dependencies import OnUnsatisfiable, wait_reason
    assert wait_reason(env.store.pipelines.deps_of(c), OnUnsatisfiable.WAIT) == (
        f"after {a} (CANCELED): ok can never hold; waits until canceled")


def test_a_jobspec_with_after_round_trips_through_its_dict_and_the_parser(env: Env) -> None:
    import yaml

    from service.jobspec.model import JobSpec
    from service.jobspec.spec import parse_jobspec
    a = "mvp2-alice-ppo-20251223-143201-0c01"
    b = "mvp2-alice-ppo-20251223-143201-0c02"
    text = yaml.safe_load(_spec(env.root).replace("{", "{after: {ok: [" + a + "], any: ["
                                                   + b + "]}, ", 1))
    spec = parse_jobspec(yaml.safe_dump(text), env.settings, "alice")
    assert spec.after == (("ok", a), ("any", b)) and spec.on_unsatisfiable == "cancel"
    assert spec.to_dict()["after"] == {"ok": [a], "any": [b]}
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert parse_jobspec(yaml.safe_dump(spec.to_dict()), env.settings, "alice") == spec


def test_a_pipeline_counts_as_one_submission_against_the_owners_quota(env: Env) -> None:
    from dataclasses import replace

    from service.config import UserSettings
    from service.policy.quotas import Limits
    from service.store.writer import QuotaExceeded
    settings = replace(env.settings, users=UserSettings(
        per_user={"alice": Limits(max_waiting_tasks=1)}))
    _task(env, "mvp2-alice-ppo-20251223-143201-0d01", "alice")
    text = _doc(env.root)
    with pytest.raises(QuotaExceeded, match="max_waiting_tasks"):
        submit_pipeline(env.store, parse_pipeline(text), text, settings, "alice", T0)
    assert env.store.pipelines.list_pipelines(None, 10) == []
    assert len(env.store.tasks.list_tasks(limit=10)[0]) == 1
    submit_pipeline(env.store, parse_pipeline(text), text, settings, "alice", T0,
                    is_admin=True)  # admins have no quota
