"""Step 3 of a tick: the plan applied (``service.scheduling.planner`` decides, this module acts).

``Applier.admit`` reads the runnable window and the attempts on the cluster, asks the
planner for a plan and performs it: the claim (-> SUBMITTING + attempt row, committed
before Ray is called, so a crash in between is resolved by the reconcile's step 0 and
never submits an attempt twice), the Ray submit, the stops of a preemption, the reasons of
the tasks that wait. It also keeps what admission remembers between ticks: the guard's
kept nodes, the fair-share ledger, the expected run times.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable

from service.cluster.boundary import (
    Cluster,
    ClusterSnapshot,
    ClusterUnavailable,
    JobAlreadyExists,
    JobNotFound,
    SubmitRejected,
    SubmitRequest,
)
from service.config import Settings, thaw
from service.domain.reasons import Planned, Reason
from service.domain.states import FailureKind, TaskState
from service.engine.artifacts import Artifacts
from service.engine.ports import SchedulerStore
from service.engine.tick_report import TickReport
from service.jobspec.model import JobSpec
from service.jobspec.submission import build_submit_request, driver_argv
from service.scheduling.admission import unreachable
from service.scheduling.cordon import explain, out_of_admission
from service.scheduling.deep import DeepEstimates
from service.scheduling.fairshare import Ledger, Share, Span, decayed_usage
from service.scheduling.plan import PlanInput, Preemption, Wait
from service.scheduling.planner import Planner
from service.scheduling.runtimes import RuntimeModel
from service.store.writer import ActiveRow, Claim, RunnableRow, StaleState

log = logging.getLogger(__name__)

# the expected run times (``service.scheduling.runtimes``) learn from the runs among the
# attempts that ended last, read again once a minute
RUNTIMES_SCAN = 2000
RUNTIMES_EVERY_S = 60.0
# waiting tasks whose reason one tick writes, the first in admission order: each costs
# about 60 us of CPU (the row, its indexes, its event), so the first tick after a burst
# of submissions (or a restart) writing every examined task's reason would take a tick of
# 30-50 ms; the rest keep their old reason (or stay QUEUED) until a later tick
REASON_WRITES = 32


class _Submit(enum.Enum):
    SUBMITTED = "submitted"  # Ray has it (or already had it)
    ENDED = "ended"  # refused for good or moved away meanwhile: nothing reserved
    UNAVAILABLE = "unavailable"  # Ray did not answer: stop submitting this tick


class Applier:
    """Admission's effects, tick after tick, and what it remembers between ticks."""

    def __init__(self, store: SchedulerStore, cluster: Cluster, settings: Settings,
                 artifacts: Artifacts, planner: Planner, backfill_window: int) -> None:
        self.store = store
        self.cluster = cluster
        self.settings = settings
        self.sched = settings.scheduler
        self.artifacts = artifacts
        self.planner = planner
        self.backfill_window = backfill_window
        # each user's fair share as the last admission saw it (the queue shows it)
        self.last_shares: dict[str | None, Share] = {}
        # task id -> planned start, from the last plan's reservations (none without them)
        # and from the deep estimates of the tasks it left unestimated
        self.last_estimates: dict[str, Planned] = {}
        self.deep = DeepEstimates()
        self._ledger: Ledger | None = None  # decayed usage (fair_share_half_life_s)
        # the node ids the guard kept last tick: they have been draining, so the guard
        # keeps them again (for the same gang, or the one that holds the guard next)
        self.reservation: frozenset[str] = frozenset()
        # the tasks the last plan gave a firm reservation (kept whatever their user holds)
        self.reserved: frozenset[str] = frozenset()
        # expected run times for the estimates, from recent runs (reservations only)
        self._runtimes: tuple[float, RuntimeModel] | None = None  # (read at, model)

    def admit(self, now: float, snapshot: ClusterSnapshot | ClusterUnavailable,
               report: TickReport, hold: Reason | None = None) -> None:
        """Apply the planner's decisions: submit what starts, record why the rest waits,
        stop the victims of a preemption. A submit Ray refuses leaves its room unused
        until the next tick; Ray not answering makes every later task wait. ``hold``: why
        nothing may start this tick (a fence that does not hold its node yet): what would
        start waits with it, and nobody is preempted."""
        candidates = self.store.tasks.runnable(now, self.backfill_window,
                                               per_user=self.sched.fair_share)
        active = self.store.tasks.active()
        charges = self._charges(active, now)
        if isinstance(snapshot, ClusterUnavailable):
            reason = unreachable(snapshot)
            self._wait([(c, reason) for c in candidates], now, report)
            self.last_estimates = {}
            self.deep.reset()
            return
        # cordoned and drained nodes are absent to the planner (service.scheduling.cordon)
        states = {row.name: row for row in self.store.nodes.states()}
        snapshot, cordoned = out_of_admission(snapshot, states)
        plan = self.planner.plan(PlanInput(now, candidates, active, snapshot, charges,
                                           self.store.users.disabled_users(), self.reservation,
                                           self._runtime_model(now), self.reserved))
        waits: list[tuple[RunnableRow, Reason]] = []
        down: Reason | None = None  # Ray stopped answering the submits
        for step in plan.steps:
            if down is not None:
                waits.append((step.cand, down))
            elif hold is not None and not isinstance(step, Wait):
                waits.append((step.cand, hold))
            elif isinstance(step, Wait):  # the gang is worked out only with a node out
                waits.append((step.cand, step.why if not cordoned else explain(
                    step.why, self.planner.gang(step.cand), cordoned, states)))
            else:
                outcome = self._submit(step.cand, now, report)
                if outcome is _Submit.SUBMITTED:
                    report.submitted += 1
                elif outcome is _Submit.UNAVAILABLE:
                    down = unreachable(report.unreachable)
        if plan.preemption is not None and down is None and hold is None:
            self._preempt(plan.preemption, active, now, report)
        self.reservation = plan.kept
        self.reserved = plan.reserved
        self.last_shares = plan.shares
        self.deep.advance(plan.deep, now)
        self.last_estimates = self.deep.merged(plan.estimates)
        self._wait(waits, now, report)

    def _runtime_model(self, now: float) -> RuntimeModel | None:
        """What recent runs say of run times, read again every ``RUNTIMES_EVERY_S``."""
        if self.sched.reservations <= 0:
            return None
        if self._runtimes is None or now - self._runtimes[0] >= RUNTIMES_EVERY_S:
            self._runtimes = (now, RuntimeModel(self.store.attempts.recent_runs(RUNTIMES_SCAN)))
        return self._runtimes[1]

    # -- fair share ------------------------------------------------------------------------
    def _charges(self, active: list[ActiveRow], now: float) -> dict[str | None, float]:
        """Each user's fair-share charge now: GPUs of their active tasks, or (with a
        half-life) their decayed usage in GPU units (``fairshare.Ledger``)."""
        held: dict[str | None, float] = {}
        for row in active:
            held[row.user] = held.get(row.user, 0.0) + row.total_gpus
        half_life = self.sched.fair_share_half_life_s
        if half_life is None:
            return held
        if self._ledger is None:
            self._ledger = Ledger(half_life, self._usage_history(now, half_life), now)
        self._ledger.advance(now, held)
        return self._ledger.charges()

    def _usage_history(self, now: float, half_life: float) -> dict[str | None, float]:
        """Decayed usage from the attempts of the last 20 half-lives (the rest weighs
        less than a millionth), read once when the scheduler starts."""
        spans = [Span(s.user, s.gpus, s.start_time, s.end_time)
                 for s in self.store.usage.usage_spans(now - 20 * half_life, now)
                 if s.start_time is not None]
        return decayed_usage(spans, now, half_life)

    # -- preemption ------------------------------------------------------------------------
    def _preempt(self, preemption: Preemption, active: list[ActiveRow], now: float,
                 report: TickReport) -> None:
        """Stop the victims the planner chose for ``preemption.cand``."""
        cand, victims = preemption.cand, preemption.victims
        sids = {r.task_id: r.ray_submission_id for r in active}
        # Recorded before Ray is asked: a crash in between leaves marked attempts,
        # whose stop reconcile sends every tick; never a stopped job taken for failed.
        marked = self.store.attempts.request_preemption(
            [(v.task_id, v.attempt_no) for v in victims], cand.task_id, now,
            {"priority": cand.priority})
        for task_id in marked:
            try:
                self.cluster.stop(sids[task_id])
            except JobNotFound:
                pass  # gone already: reconcile sees it
            except ClusterUnavailable as exc:
                report.unreachable = str(exc)  # reconcile sends it again
                break
        names = ", ".join(f"{v.task_id} (priority {v.priority})" for v in victims)
        report.preempted += len(marked)
        log.info("preempting %s for %s (priority %d)", names, cand.task_id, cand.priority)

    def _wait(self, waits: Iterable[tuple[RunnableRow, Reason]], now: float,
              report: TickReport) -> None:
        """Record why tasks wait; rows whose state and reason are unchanged are not
        rewritten (a long queue costs no writes per tick), and at most ``REASON_WRITES``
        are (the first in admission order: the head of the queue is always up to date); the
        reasons of the tasks behind those are not even rendered."""
        recheck = self.sched.pending_recheck_s
        items = []
        texts: dict[Reason, str] = {}  # a long queue waits for a few dozen reasons
        # the same by identity first (the planner hands out one value per distinct reason:
        # hashing a reason costs more than this lookup); the reason is kept in the value,
        # so its id is not reused within the loop
        by_id: dict[int, tuple[Reason, str]] = {}
        for cand, reason in waits:
            report.pending += 1
            if len(items) >= REASON_WRITES:
                continue
            known = by_id.get(id(reason))
            if known is None:
                text = texts.get(reason)
                if text is None:
                    text = texts[reason] = reason.text
                by_id[id(reason)] = (reason, text)
            else:
                text = known[1]
            if (recheck > 0 or cand.state is TaskState.QUEUED
                    or cand.pending_reason != text or cand.reason_kind != reason.kind):
                items.append((cand.task_id, cand.state, reason))
        if items:
            self.store.attempts.mark_pending(items, now, now + recheck if recheck > 0 else None)

    def _submit(self, cand: RunnableRow, now: float, report: TickReport) -> _Submit:
        try:
            claim = self.store.attempts.claim_for_submit(cand.task_id, cand.state, now)
        except StaleState:
            return _Submit.ENDED  # canceled meanwhile
        try:
            req = build_submit_request(
                JobSpec.from_dict(claim.spec), task_id=claim.task_id,
                attempt_no=claim.attempt_no, user=claim.user, settings=self.settings,
            )
        except (TypeError, ValueError) as exc:
            self.store.attempts.fail_submit(claim.task_id, claim.attempt_no,
                                            FailureKind.UNKNOWN.value,
                                   f"cannot build the Ray submission: {exc}", now)
            return _Submit.ENDED
        self._write_submission(claim, req)
        try:
            self.cluster.submit(req)
        except JobAlreadyExists:
            self.store.attempts.mark_submitted(claim.task_id, claim.attempt_no, now,
                                               already_existed=True)
        except ClusterUnavailable as exc:
            report.unreachable = str(exc)
            self.store.attempts.release_claim(claim.task_id, claim.attempt_no,
                                              unreachable(exc), now)
            return _Submit.UNAVAILABLE
        except SubmitRejected as exc:
            self.store.attempts.fail_submit(claim.task_id, claim.attempt_no,
                                            FailureKind.USER_ERROR.value,
                                            f"Ray rejected the submission: {exc}", now)
            return _Submit.ENDED
        else:
            self.store.attempts.mark_submitted(claim.task_id, claim.attempt_no, now)
        return _Submit.SUBMITTED

    def _write_submission(self, claim: Claim, req: SubmitRequest) -> None:
        payload = {
            "submission_id": req.submission_id,
            "entrypoint": req.entrypoint,
            "argv": driver_argv(req.entrypoint),
            "runtime_env": thaw(req.runtime_env),
            "entrypoint_resources": dict(req.entrypoint_resources),
            "entrypoint_num_cpus": req.entrypoint_num_cpus,
            "metadata": dict(req.metadata),
        }
        try:
            self.artifacts.write_submission(req.submission_id, claim.user, claim.jobspec_yaml,
                                            payload)
        except OSError as exc:  # shared storage trouble must not wedge the queue
            log.warning("writing artifacts of %s failed: %s", req.submission_id, exc)
