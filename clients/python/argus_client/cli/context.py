"""What a command gets: the SDK client, its arguments, where to write."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from argus_client.client import ArgusClient


@dataclass
class Ctx:
    client: ArgusClient
    args: argparse.Namespace
    out: TextIO
    err: TextIO

    @property
    def as_json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    def emit(self, data: Any, render: Callable[[Any], str]) -> None:
        """``data`` (the API's JSON) as ``render`` shows it, or as JSON with ``--json``."""
        text = json.dumps(data, indent=2) if self.as_json else render(data)
        self.out.write(text + "\n")

    def note(self, text: str) -> None:
        """A line for the person at the terminal (stderr: never mixed with the output)."""
        self.err.write(f"argus: {text}\n")
        self.err.flush()


AddParser = Callable[[Any, str, str], argparse.ArgumentParser]
Command = Callable[[Ctx], int]
