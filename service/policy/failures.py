"""Classify a failed attempt from Ray's status, Ray's message and the driver log tail (pure).

``CLUSTER_LOST`` comes from text only in one case: the entrypoint's own line saying an
earlier driver of the task still held the task's lock, so this attempt never started
(``service.domain.layout.LOCK_BUSY_LINE``; the earlier driver is one Ray lost track of).
Otherwise the scheduler decides it when Ray no longer knows the submission id, or when
Ray lost the job's supervisor (below) and the driver left no word of its end. Order
matters: verl's fail-fast resource check is looked for first
(it is retryable and often sits inside a generic ``RayTaskError`` traceback), then the
signs of a user mistake, then any exception at all.
"""

from __future__ import annotations

import re
from enum import StrEnum

from service.domain.layout import LOCK_BUSY_LINE
from service.domain.states import FailureKind, RayStatus

# verl: "Total available GPUs 2.0 is less than total desired GPUs 4"
INSUFFICIENT_RE = re.compile(
    r"Total available GPUs \d+(?:\.\d+)? is less than total desired GPUs \d+"
)

# The entrypoint's line when an earlier driver of the task held the lock, as printed: at a
# line's start, with the lock's path expanded. Ray's log starts with the entrypoint itself,
# where the same words follow an ``echo "`` and precede ``$argus_lock``.
LOCK_BUSY_RE = re.compile(rf"^{re.escape(LOCK_BUSY_LINE)} \(it holds [^$]", re.MULTILINE)

_USER_ERROR_RES = tuple(
    re.compile(p)
    for p in (
        r"\bFileNotFoundError\b",
        r"\bIsADirectoryError\b",
        r"\bNotADirectoryError\b",
        r"No such file or directory",
        # hydra / omegaconf: a bad override or an unknown key
        r"Could not override '",
        r"Key '[^']*' is not in struct",
        r"\bConfigAttributeError\b",
        r"\bConfigKeyError\b",
        r"\bMissingMandatoryValue\b",
        r"hydra\.errors\.\w+",
        r"Error merging override",
        # hydra.utils.instantiate: a structured config refused the values, e.g. verl 0.9's
        # "Error in call to target 'verl.workers.config.actor.FSDPActorConfig':
        #  AssertionError(\"[actor] Please set at least one of ...\")"
        r"Error in call to target '",
        # the trainer module itself cannot be imported (bad code_path)
        r"No module named '?verl",
        # Hugging Face: model id that is neither a local folder nor a known repo
        r"is not a local folder and is not a valid model identifier",
        # Ray could not build the job's runtime_env
        r"\bRuntimeEnvSetupError\b",
        r"[Rr]untime_?env setup fail",
        r"Failed to set up runtime environment",
    )
)

_RUNTIME_ERROR_RES = (
    re.compile(r"Traceback \(most recent call last\)"),
    # Hydra's wrapper around any exception of the app (it hides the traceback)
    re.compile(r"Error executing job with overrides"),
    re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b(?:\([^)]*\))?:"),
    re.compile(r"CUDA out of memory"),
)

# What Ray's job manager writes when it lost the job's supervisor rather than saw the driver
# end: a supervisor that could not reach the GCS during a head failover (ray#65025, #65608),
# one whose node died, one the manager could not find after a restart. The driver itself
# may have ended well, failed, or be gone: its exit marker (``service.domain.layout.EXIT_MARKER``)
# decides, not this status.
SUPERVISOR_LOST_RE = re.compile(
    r"^(?:Unexpected error occurred|Job supervisor actor died)\b")


class DriverEnd(StrEnum):
    SUCCEEDED = "succeeded"  # the marker says 0: Ray lost the final status, not the run
    FAILED = "failed"        # the marker says non-zero: classify as any failure
    GONE = "gone"            # no marker: the run ended without a word (CLUSTER_LOST)


def supervisor_lost(ray_status: RayStatus, message: str | None) -> bool:
    """Did Ray fail the job because it lost its supervisor (not because the driver failed)?"""
    return ray_status is RayStatus.FAILED and bool(SUPERVISOR_LOST_RE.match(message or ""))


def driver_end(exit_code: int | None) -> DriverEnd:
    """How the driver ended by its own marker, for a job whose supervisor Ray lost."""
    if exit_code is None:
        return DriverEnd.GONE
    return DriverEnd.SUCCEEDED if exit_code == 0 else DriverEnd.FAILED


# Only the end of a driver log is examined: the error is there, and it bounds the work.
LOG_TAIL_CHARS = 64_000


def classify(ray_status: RayStatus | None, message: str | None, log_tail: str | None
             ) -> FailureKind:
    """The failure kind of an attempt that ended without success.

    ``ray_status`` may be None when Ray's status is not known (e.g. a hung attempt the
    scheduler stopped itself); a SUCCEEDED attempt is not a failure and is refused.
    """
    if ray_status is RayStatus.SUCCEEDED:
        raise ValueError("a SUCCEEDED attempt has no failure kind")
    texts = [t for t in (message or "", (log_tail or "")[-LOG_TAIL_CHARS:]) if t]
    if any(LOCK_BUSY_RE.search(t) for t in texts):
        return FailureKind.CLUSTER_LOST
    if any(INSUFFICIENT_RE.search(t) for t in texts):
        return FailureKind.INSUFFICIENT_RESOURCES
    if any(r.search(t) for r in _USER_ERROR_RES for t in texts):
        return FailureKind.USER_ERROR
    if any(r.search(t) for r in _RUNTIME_ERROR_RES for t in texts):
        return FailureKind.RUNTIME_ERROR
    return FailureKind.UNKNOWN


_EXCEPTION_LINE_RE = re.compile(r"^\s*[\w.]*(?:Error|Exception)\b.*:")
SUMMARY_MAX = 300


def summarize(kind: FailureKind, message: str | None, log_tail: str | None) -> str:
    """One line for ``error_summary``: the kind plus the most telling line of the text.

    That is verl's resource line when present, else the last exception line, else the
    last non-empty line of Ray's message (or of the log).
    """
    texts = [t for t in (message or "", (log_tail or "")[-LOG_TAIL_CHARS:]) if t]
    best = ""
    for text in texts:
        match = INSUFFICIENT_RE.search(text)
        if match:
            best = match.group(0)
            break
    if not best:
        for text in texts:
            lines = [ln.strip() for ln in text.splitlines() if _EXCEPTION_LINE_RE.match(ln)]
            if lines:
                best = lines[-1]
                break
    if not best:
        for text in texts:
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            if lines:
                best = lines[-1]
                break
    line = f"{kind}: {best}" if best else str(kind)
    return line if len(line) <= SUMMARY_MAX else line[: SUMMARY_MAX - 3] + "..."


def gave_up(attempts: int, max_attempts: int, last: str) -> str:
    """The summary of a task whose retryable failures used up its attempts (``last``: the
    last attempt's ``summarize`` line)."""
    return f"gave up after {attempts} attempts (max_attempts={max_attempts}); last failure {last}"


# -- what other users see of a summary -----------------------------------------------------
#
# A summary's first words say who wrote it. ``summarize`` starts with the failure kind and
# quotes the job (its driver log, Ray's message with the log's tail) after it; ``gave_up``
# wraps one; everything else is Argus's own sentence: canceled by request (the API, the
# engine), finished before the cancel took effect, the driver's exit marker (engine),
# dependency never satisfied (service.policy.dependencies.cancel_reason), cannot resolve
# the stage's references (service.engine.dependency_tick: names files, never quotes them),
# and ``<KIND>: <Argus's sentence>`` for a submission Argus could not build or Ray refused
# (service.engine.applier), a time limit, a preemption, a job Ray lost (engine). Text after
# a kind is kept only where it is one of Argus's sentences in full, with nothing free in it
# (numbers, ids); a sentence that quotes Ray or the job is cut before the quote.

_KIND_LINE_RE = re.compile(
    rf"({'|'.join(re.escape(k.value) for k in FailureKind)})(?:: (.*))?", re.DOTALL)
_GAVE_UP_RE = re.compile(
    r"(gave up after \d+ attempts \(max_attempts=\d+\)); last failure (.*)", re.DOTALL)
_ID = r"[A-Za-z0-9_.:-]{1,200}"
# (kind, Argus's sentence after it): kept whole when it matches in full
_KIND_SENTENCES = (
    (FailureKind.TIME_LIMIT, re.compile(r"ran past its max_runtime_s \([0-9.e+]+ s\): stopped")),
    (FailureKind.PREEMPTED, re.compile(rf"preempted for {_ID}")),
    (FailureKind.PREEMPTED, re.compile(rf"node {_ID} drained")),
    (FailureKind.CLUSTER_LOST, re.compile(rf"Ray no longer knows job {_ID} \(head restarted\?\)")),
)
# (kind, the start of Argus's sentence before it quotes Ray or the job): that start alone
_KIND_PREFIXES = (
    (FailureKind.CLUSTER_LOST, "Ray lost the job's supervisor",
     "Ray lost the job's supervisor and the driver left no exit marker"),
    (FailureKind.UNKNOWN, "cannot build the Ray submission:", "cannot build the Ray submission"),
    (FailureKind.USER_ERROR, "Ray rejected the submission:", "Ray rejected the submission"),
)
# Argus's sentences with no kind before them: kept whole when one matches in full
_ARGUS_SENTENCES = re.compile(
    r"canceled by request(?: \(Ray status [A-Z]+\))?"
    r"|finished before the cancel took effect"
    rf"|dependency never satisfied: {_ID} ended [A-Z_]+ \(after [a-z]+\)"
    r"|cannot resolve the stage's references: .*", re.DOTALL)
_EXIT_MARKER = "the driver exited 0 (its exit marker); Ray lost the final status"


def _public_kind_line(kind: str, rest: str | None) -> str:
    if rest is not None:
        for known, sentence in _KIND_SENTENCES:
            if kind == known and sentence.fullmatch(rest):
                return f"{kind}: {rest}"
        for known, start, shown in _KIND_PREFIXES:
            if kind == known and rest.startswith(start):
                return f"{kind}: {shown}"
    return kind


def public_summary(summary: str | None) -> str | None:
    """``error_summary`` as users other than the task's owner and admins see it: Argus's
    own words and the failure kind, without what the job wrote (a quoted log line may hold
    a secret the job printed). ``"RUNTIME_ERROR: CUDA error: out of memory"`` ->
    ``"RUNTIME_ERROR"``; a summary in no known form shows nothing (None)."""
    if summary is None:
        return None
    kind = _KIND_LINE_RE.fullmatch(summary)
    if kind:
        return _public_kind_line(kind.group(1), kind.group(2))
    gave = _GAVE_UP_RE.fullmatch(summary)
    if gave:
        last = _KIND_LINE_RE.fullmatch(gave.group(2))
        if last is None:
            return gave.group(1)
        return f"{gave.group(1)}; last failure {_public_kind_line(last.group(1), last.group(2))}"
    if _ARGUS_SENTENCES.fullmatch(summary):
        return summary
    if summary.startswith(_EXIT_MARKER):
        return _EXIT_MARKER
    return None
