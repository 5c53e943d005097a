"""What a command gets: the SDK client, its arguments, where to write; and how an error
is shown (one line and a hint on stderr, or a JSON object on stdout with ``--json``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from argus_client.errors import ApiError, ArgusError

if TYPE_CHECKING:
    from argus_client.client import ArgusClient


def isatty(stream: TextIO) -> bool:
    probe = getattr(stream, "isatty", None)
    return bool(probe is not None and probe())


@dataclass
class Ctx:
    client: ArgusClient
    args: argparse.Namespace
    out: TextIO
    err: TextIO

    @property
    def as_json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    @property
    def parsable(self) -> bool:
        """Only the data a script wants (an id alone): ``-q``/``--parsable``, or stdout is
        not a terminal (``ID=$(argus submit job.yaml)``)."""
        return bool(getattr(self.args, "parsable", False)) or not isatty(self.out)

    @property
    def header(self) -> bool:
        """Tables start with their header line (not with ``--no-header``)."""
        return not getattr(self.args, "no_header", False)

    def emit(self, data: Any, render: Callable[[Any], str]) -> None:
        """``data`` (the API's JSON) as ``render`` shows it, or as JSON with ``--json``."""
        text = json.dumps(data, indent=2) if self.as_json else render(data)
        self.out.write(text + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        """A line for the person at the terminal (stderr: never mixed with the output)."""
        self.err.write(f"argus: {text}\n")
        self.err.flush()

    def hint(self, text: str) -> None:
        """A hint that goes with the output (stderr; nothing with ``--json``)."""
        if not self.as_json:
            self.note(text)


def error_code(exc: ArgusError) -> str:
    """The ``code`` of an error that is not the API's: ``ArgusConnectionError`` ->
    ``connection_error``, ``UsageError`` -> ``usage_error``."""
    name = type(exc).__name__.removeprefix("Argus")
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def error_json(exc: ArgusError) -> dict[str, Any]:
    """``{"error": {status, code, message, details, hint}}``: the API's error object, or
    one of the same shape (status null) for an error of the client's own."""
    if isinstance(exc, ApiError):
        return exc.to_json()
    return {"error": {"status": None, "code": error_code(exc), "message": str(exc),
                      "details": [], "hint": exc.hint}}


def report(exc: ArgusError, *, as_json: bool, out: TextIO, err: TextIO) -> None:
    """An error as one line (the fields it names, its hint) on stderr, or as JSON on
    stdout."""
    if as_json:
        out.write(json.dumps(error_json(exc), indent=2) + "\n")
        return
    err.write(f"argus: {exc}\n")
    for d in exc.details if isinstance(exc, ApiError) else []:
        if isinstance(d, dict) and "field" in d:
            err.write(f"  {d['field']}: {d.get('message', '')}\n")
        else:
            err.write(f"  {d}\n")
    if exc.hint:
        err.write(f"argus: hint: {exc.hint}\n")


AddParser = Callable[[Any, str, str], argparse.ArgumentParser]
Command = Callable[[Ctx], int]
