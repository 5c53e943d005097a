"""A YAML front door for small flat documents that hostile input cannot crash or stall.

PyYAML's loaders compose the whole node graph before anything can look at it: libyaml's
composer recurses once per nesting level (a 60 KB ``[[[[...`` body overflows the C stack
and kills the process), aliases and merge keys expand without bound (a 752-byte
``<<: [*a, *a, ...]`` chain costs seconds and hundreds of MB), and scalar constructors
raise plain ``ValueError`` for ``!!int 'abc'`` or a 5,000-digit integer.

``load`` never calls the composer. It walks the parser's event stream (libyaml's parser
is an explicit state machine; it is asked for one event at a time) and builds plain
dicts, lists and scalars itself, refusing, before anything is built:

* nesting deeper than ``max_depth`` and more than ``max_nodes`` nodes;
* anchors, aliases and merge keys (``<<``): nothing is ever shared or expanded;
* complex (non-scalar) mapping keys and explicit tags (``!!int``, ``!foo``);
* scalars longer than ``max_scalar_chars`` and integers with more than
  ``max_int_digits`` digits;
* a second document, and a parse running past ``budget_s`` of wall time.

Every problem is a detail ``{"field", "message", "line", "column"}`` (1-based; ``field``
is the top-level key the problem sits under, or ``body``), including the parser's own
errors and the scalar constructors' (``!!timestamp``-like ``2001-13-45``). Structural
problems stop the walk at once; scalar problems are collected and the walk goes on, so
one answer lists them all. A key given twice in a mapping is an error too.

No I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    NodeEvent,
    ScalarEvent,
    SequenceEndEvent,
    StreamEndEvent,
)
from yaml.resolver import Resolver

# libyaml's parser when PyYAML was built with it (about 10x faster); the pure-Python
# parser is the same state machine.
_Parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BUDGET_EVERY = 64  # events between two looks at the clock


@dataclass(frozen=True, slots=True)
class Limits:
    max_depth: int = 2  # a mapping of fields, one of them a list
    max_nodes: int = 1024
    max_scalar_chars: int = 8192
    max_int_digits: int = 32
    budget_s: float = 0.5


class YamlDocError(ValueError):
    """The text is not an acceptable document; ``details`` lists each problem."""

    def __init__(self, details: list[dict[str, Any]]) -> None:
        self.details = details
        super().__init__("; ".join(d["message"] for d in details))


class _Stop(Exception):
    """A structural problem: the walk ends here."""


def error_detail(field: str, message: str, line: int, column: int) -> dict[str, Any]:
    return {"field": field, "message": f"{message} (line {line}, column {column})",
            "line": line, "column": column}


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_NO_KEY = _Sentinel("<no key>")  # a mapping waiting for its next key
_INVALID = _Sentinel("<invalid>")  # a scalar that was refused (already reported)


class _Open:
    """A collection being built: its container, the key waiting for a value (mappings),
    the keys seen so far, and the top-level field it sits under."""

    __slots__ = ("container", "field", "key", "seen")

    def __init__(self, container: dict | list, field: str) -> None:
        self.container = container
        self.key: Any = _NO_KEY
        self.seen: set[Any] = set()
        self.field = field


class _Builder:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.details: list[dict[str, Any]] = []
        self.resolver = Resolver()
        self.constructor = SafeConstructor()
        self.nodes = 0
        self.stack: list[_Open] = []
        self.root: Any = None

    # -- reporting -----------------------------------------------------------------

    def field(self) -> str:
        """The top-level key the walk is under, or "body"."""
        if len(self.stack) >= 2:
            return self.stack[1].field
        if self.stack and self.stack[0].key not in (_NO_KEY, _INVALID):
            return str(self.stack[0].key)
        return "body"

    def problem(self, event: Any, message: str) -> None:
        mark = event.start_mark
        self.details.append(error_detail(self.field(), message, mark.line + 1, mark.column + 1))

    def stop(self, event: Any, message: str) -> None:
        self.problem(event, message)
        raise _Stop

    # -- events --------------------------------------------------------------------

    def node(self, event: NodeEvent) -> None:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            self.stop(event, f"more than {self.limits.max_nodes} YAML nodes")
        if isinstance(event, AliasEvent):
            self.stop(event, f"aliases (*{event.anchor}) are not accepted")
        if event.anchor is not None:
            self.stop(event, f"anchors (&{event.anchor}) are not accepted")
        expecting_key = bool(self.stack) and isinstance(self.stack[-1].container, dict) \
            and self.stack[-1].key is _NO_KEY
        if isinstance(event, CollectionStartEvent):
            if expecting_key:
                self.stop(event, "complex (non-scalar) mapping keys are not accepted")
            self.collection(event)
        else:
            self.scalar(event, expecting_key)

    def collection(self, event: CollectionStartEvent) -> None:
        if event.tag is not None:
            self.stop(event, f"explicit tags ({event.tag}) are not accepted")
        if len(self.stack) >= self.limits.max_depth:
            self.stop(event, f"nested deeper than {self.limits.max_depth} levels")
        container: dict | list = {} if isinstance(event, MappingStartEvent) else []
        opened = _Open(container, self.field())
        self.add(event, container, is_key=False)
        self.stack.append(opened)

    def end(self) -> None:
        self.stack.pop()

    def scalar(self, event: ScalarEvent, is_key: bool) -> None:
        value: Any = _INVALID
        if event.tag is not None:
            self.problem(event, f"explicit tags ({event.tag}) are not accepted")
        elif len(event.value) > self.limits.max_scalar_chars:
            self.problem(event, f"a scalar of {len(event.value)} characters, over the limit "
                                f"of {self.limits.max_scalar_chars}")
        else:
            value = self.construct(event)
        self.add(event, value, is_key=is_key)

    def construct(self, event: ScalarEvent) -> Any:
        tag = self.resolver.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag == _MERGE_TAG:
            self.stop(event, "merge keys (<<) are not accepted")
        if tag == _INT_TAG:
            digits = sum(ch.isdigit() for ch in event.value)
            if digits > self.limits.max_int_digits:
                self.problem(event, f"an integer of {digits} digits, over the limit of "
                                    f"{self.limits.max_int_digits}")
                return _INVALID
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        build = self.constructor.yaml_constructors.get(tag, SafeConstructor.construct_undefined)
        try:
            return build(self.constructor, node)
        except yaml.MarkedYAMLError as exc:
            self.problem(event, f"cannot read the value: {exc.problem}")
        except (ValueError, OverflowError, TypeError) as exc:
            kind = tag.rsplit(":", 1)[-1]
            self.problem(event, f"cannot read {event.value[:60]!r} as {kind}: {exc}")
        return _INVALID

    def add(self, event: NodeEvent, value: Any, *, is_key: bool) -> None:
        if not self.stack:
            self.root = value
            return
        top = self.stack[-1]
        if isinstance(top.container, list):
            top.container.append(value)
        elif is_key:
            if value in top.seen:
                line, column = event.start_mark.line + 1, event.start_mark.column + 1
                self.details.append({
                    "field": str(value) if len(self.stack) == 1 else self.field(),
                    "message": f"field given more than once (again on line {line})",
                    "line": line, "column": column,
                })
            elif value is not _INVALID:
                top.seen.add(value)
            top.key = value
        else:
            if top.key is not _INVALID and top.key not in top.container:
                top.container[top.key] = value
            top.key = _NO_KEY


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def load(text: str, limits: Limits = Limits(),
         clock: Callable[[], float] = time.monotonic) -> Any:
    """The single document in ``text`` as dicts, lists and scalars (None when empty).

    Raises YamlDocError listing every problem found before the walk had to stop.
    """
    builder = _Builder(limits)
    started = clock()
    parser = _Parser(text)
    documents = 0
    count = 0
    try:
        while True:
            event = parser.get_event()
            count += 1
            if count % _BUDGET_EVERY == 0 and clock() - started > limits.budget_s:
                builder.stop(event, f"parsing took longer than {limits.budget_s} s")
            if isinstance(event, NodeEvent):
                builder.node(event)
            elif isinstance(event, MappingEndEvent | SequenceEndEvent):
                builder.end()
            elif isinstance(event, DocumentStartEvent):
                documents += 1
                if documents > 1:
                    builder.stop(event, "expected a single document, found another one")
            elif isinstance(event, StreamEndEvent):
                break
    except _Stop:
        pass
    except yaml.MarkedYAMLError as exc:
        what = "; ".join(p for p in (exc.context, exc.problem) if p) or "cannot parse"
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        builder.details.append(error_detail("body", f"malformed YAML: {what}", line, column))
    except yaml.reader.ReaderError as exc:
        line, column = _position(text, exc.position)
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        message = f"malformed YAML: unacceptable character #x{char:04x}: {exc.reason}"
        builder.details.append(error_detail("body", message, line, column))
    finally:
        parser.dispose()
    if builder.details:
        raise YamlDocError(builder.details)
    return builder.root
