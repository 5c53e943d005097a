"""How many live streams one session and one user may hold open (pure bookkeeping).

A live stream holds a connection for minutes. Without a bound per party, one user's
tabs (or a script replaying their cookie) would fill the server's connection cap and
lock everyone out. ``StreamSlots`` counts open streams per session and per user; a
stream over either limit is refused (the page then refreshes on its timer instead).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class StreamSlots:
    per_session: int  # 0: no limit
    per_user: int  # 0: no limit
    _sessions: Counter[str] = field(default_factory=Counter)
    _users: Counter[str] = field(default_factory=Counter)

    def session_full(self, session: str) -> str | None:
        """The session's limit, named, when it is already full: checked before the
        session is looked up, so a script re-opening streams on a full session costs no
        read of the store."""
        if self.per_session and self._sessions[session] >= self.per_session:
            return (f"this sign-in already has {self.per_session} live pages open "
                    "(max_streams_per_session)")
        return None

    def acquire(self, session: str, user: str) -> str | None:
        """Take a slot, or say which limit is full (nothing taken)."""
        if (full := self.session_full(session)) is not None:
            return full
        if self.per_user and self._users[user] >= self.per_user:
            return (f"user {user} already has {self.per_user} live pages open "
                    "(max_streams_per_user)")
        self._sessions[session] += 1
        self._users[user] += 1
        return None

    def release(self, session: str, user: str) -> None:
        for counter, key in ((self._sessions, session), (self._users, user)):
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]

    def open_streams(self) -> int:
        return sum(self._users.values())
