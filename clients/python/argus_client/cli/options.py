"""Argument types and the options several commands share (``--no-header``, ``-q`` of a
submit, a wait's ``--timeout``/``--interval``)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def add_table_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--no-header", action="store_true",
                        help="no header line: the rows only (for scripts)")
    return parser


def add_parsable(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--parsable", action="store_true",
                        help="print the id alone, even on a terminal")


def add_key_option(parser: argparse.ArgumentParser) -> None:
    """A submit's ``--idempotency-key`` (default: a fresh one per run)."""
    parser.add_argument("--idempotency-key", metavar="KEY",
                        help="the submit's Idempotency-Key (default: a fresh one each run): "
                             "run again with the same key and file within 24 h, it prints "
                             "the same id instead of submitting again")


def add_wait_options(parser: argparse.ArgumentParser, *, with_flag: bool = False,
                     interval: float = 2.0) -> None:
    """``--timeout`` and ``--interval`` of a wait (``with_flag``: and ``--wait``, for a
    submit that then waits)."""
    if with_flag:
        parser.add_argument("--wait", action="store_true",
                            help="then wait until it ends, as wait does (its exit codes)")
    parser.add_argument("--timeout", type=positive_float, default=3600.0, metavar="S",
                        help="give up waiting after S seconds (default: %(default)s)")
    parser.add_argument("--interval", type=positive_float, default=interval, metavar="S",
                        help="seconds between polls (default: %(default)s)")
