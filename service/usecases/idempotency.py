"""Idempotent submits, the use cases' part (``service.policy.idempotency``: the rules).

The store decides replay or mismatch in the submit's own transaction
(``service.store.idempotency``). What it cannot see is a request still on its way to that
transaction: ``KeysInFlight`` holds each key while its first request is worked on in this
process, and a second request with that key meanwhile is ``KeyInUse`` (409: the draft's
"request still being processed"; a retry after it gets the first answer)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from service.policy.idempotency import IdemKey, fingerprint
from service.store.idempotency import KeyMismatch
from service.store.pipelines import DependencyError
from service.store.writer import QuotaExceeded
from service.usecases.ports import BadDependencies, KeyInUse, KeyReused, OverQuota


class KeysInFlight:
    """The keys whose request this process is working on (the event loop's only)."""

    def __init__(self) -> None:
        self._held: set[tuple[str, str]] = set()

    @contextmanager
    def hold(self, key: IdemKey | None) -> Iterator[None]:
        """Hold ``key`` for the block (None: nothing); ``KeyInUse`` when it is held."""
        if key is None:
            yield
            return
        ident = (key.user, key.key)
        if ident in self._held:
            raise KeyInUse(key.key)
        self._held.add(ident)
        try:
            yield
        finally:
            self._held.discard(ident)

    def __len__(self) -> int:
        return len(self._held)


def submit_key(user: str, key: str | None, route: str, text: str, *, as_json: bool
               ) -> IdemKey | None:
    """The store's key of a submit (None: the request sent none)."""
    if key is None:
        return None
    return IdemKey(user, key, fingerprint(route, text, as_json=as_json))



@contextmanager
def submit_refusals(route: str) -> Iterator[None]:
    """The store's refusals of a submit's write (a task's or a pipeline's), as the use
    cases' errors: the key reused with another body, a dependency problem, a quota. A
    replay (``KeyReplayed``) passes through: each submit answers it in its own shape."""
    try:
        yield
    except KeyMismatch as exc:
        raise KeyReused(exc.key.key, route) from exc
    except DependencyError as exc:
        raise BadDependencies(exc.problems) from exc
    except QuotaExceeded as exc:
        raise OverQuota(exc.refusal) from exc
