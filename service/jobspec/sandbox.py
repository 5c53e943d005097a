"""What a job may name: paths under the allowed roots and Hugging Face repo ids.

One set of rules for the JobSpec's path fields and for overrides whose value is a path
(reward functions, dataset classes, model and tokenizer paths...):

* a path is absolute, made of letters, digits and ``. _ - + @ /`` only, and lies under
  one of the allowed roots after ``posixpath.normpath`` (``..`` cannot escape; the path
  need not exist yet, and symlinks are not followed, as the service may not see the
  storage). The narrow character set is on purpose: paths reach Hydra unquoted, where
  ``, [ ] { } $ = ' "`` have meaning, and ``code_path`` goes on ``PYTHONPATH``, where
  ``:`` would add a second entry;
* a Hugging Face repo id is ``org/name``, each part letters, digits and ``. _ -``,
  starting and ending with a letter or digit, at most 96 characters, no ``..`` or ``--``;
* the users' trees (``<shared_root>/users/<user>/``) are private: a path there is allowed
  only inside the job's own user's tree, whatever the allowed roots say, and the own tree
  is allowed even where no root covers it (``PathRules``).

Pure: no I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PATH_CHARS = "letters, digits and . _ - + @ /"
_PATH_CHAR_RE = re.compile(r"[A-Za-z0-9._+@/-]")
_PATH_CHARS_RE = re.compile(r"[A-Za-z0-9._+@/-]*")
_HF_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
HF_REPO_ID_RE = re.compile(rf"{_HF_PART}/{_HF_PART}")


class SandboxError(ValueError):
    """A value names something outside what a job may use; the message says why."""


def describe(value: Any) -> str:
    """A value as a YAML user would recognise it, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value!r} (a number)"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"{shown!r} (a string)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def norm_abs(path: str) -> str:
    """``posixpath.normpath`` of an absolute path; a leading ``//`` (POSIX gives it a
    meaning) folds to ``/``."""
    return "/" + posixpath.normpath(path).lstrip("/")


def norm_roots(roots: Sequence[str]) -> tuple[str, ...]:
    return tuple(norm_abs(r) for r in roots)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True, slots=True)
class PathRules:
    """Where one job's paths may point (every path normalised).

    ``roots``: the allowed roots. ``users_root``: the parent of every user's tree; a path
    under it is allowed only under ``own`` (the job's user's tree, None: no user), which
    is allowed even outside ``roots``.
    """

    roots: tuple[str, ...]
    users_root: str | None = None
    own: str | None = None

    @classmethod
    def make(cls, roots: Sequence[str], users_root: str | None = None,
             own: str | None = None) -> PathRules:
        return cls(norm_roots(roots), None if users_root is None else norm_abs(users_root),
                   None if own is None else norm_abs(own))

    def check(self, text: str) -> str:
        """The normalised path, or SandboxError saying which rule ``text`` breaks."""
        if not text.startswith("/"):
            raise SandboxError(f"must be an absolute path, got {describe(text)}")
        if not _PATH_CHARS_RE.fullmatch(text):
            bad = sorted({ch for ch in text if not _PATH_CHAR_RE.fullmatch(ch)})
            raise SandboxError(f"contains characters not allowed in paths: {''.join(bad)!r} "
                               f"(allowed: {PATH_CHARS})")
        norm = norm_abs(text)
        if self.users_root is not None and _under(norm, self.users_root):
            if self.own is not None and _under(norm, self.own):
                return norm
            raise SandboxError(self._foreign_tree(norm))
        if not any(_under(norm, root) for root in self.roots):
            own = f" and the job's own user's tree {self.own}" if self.own else ""
            raise SandboxError(f"{norm!r} is outside the allowed roots "
                               f"({', '.join(self.roots)}){own}")
        return norm

    def _foreign_tree(self, norm: str) -> str:
        assert self.users_root is not None
        rest = norm[len(self.users_root):].strip("/")
        owner = rest.split("/", 1)[0]
        whose = (f"user {owner}'s tree ({posixpath.join(self.users_root, owner)})" if owner
                 else f"the users' trees ({self.users_root})")
        mine = (f"only its own user's tree ({self.own})" if self.own
                else "no user's tree")
        return f"{norm!r} is in {whose}; a job may read the common roots and {mine}"


Roots = Sequence[str] | PathRules  # what the path checks take: plain roots, or a job's rules


def check_path(text: str, roots: Roots) -> str:
    """The normalised path, or SandboxError saying which rule ``text`` breaks.

    ``roots``: a job's ``PathRules``, or plain roots, already normalised (``norm_roots``).
    """
    rules = roots if isinstance(roots, PathRules) else PathRules(tuple(roots))
    return rules.check(text)


def is_hf_repo_id(text: str) -> bool:
    return bool(HF_REPO_ID_RE.fullmatch(text)) and ".." not in text and "--" not in text


def _escape(text: str) -> str:
    # re.escape also escapes "-", which ECMA 262 (JSON Schema's dialect) refuses outside
    # a character class in unicode mode.
    return "".join("\\" + ch if ch in ".^$*+?()[]{}|\\" else ch for ch in text)


def tree_pattern(root: str) -> str:
    """A regular expression (JSON Schema dialect) matching ``root`` and every path under
    it (``root`` normalised)."""
    return rf"^{_escape(root.rstrip('/'))}(/|$)"


def path_pattern(roots: Sequence[str]) -> str:
    """A regular expression (JSON Schema dialect) matching normalised paths under
    ``roots``: what a generator of valid JobSpecs should produce."""
    segment = r"[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*"
    alternatives = "|".join(_escape(r.rstrip("/")) for r in roots if r != "/")
    if any(r == "/" for r in roots) or not alternatives:
        return rf"^(/{segment})+$"
    return rf"^({alternatives})(/{segment})*$"
