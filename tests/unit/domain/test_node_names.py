"""A node's name: its argus.node label, else its NodeName, else its id prefix; a NodeName
shared by several nodes (Ray started by hand: the host's IP) gives way to the id."""

from __future__ import annotations

import pytest

from service.domain.nodes import name_of, reason_problem, unique_names

ID_A, ID_B = "a" * 56, "b" * 56


@pytest.mark.parametrize(("labels", "node_name", "expected"), [
    ({"argus.node": "ray-worker-0"}, "10.0.0.3", "ray-worker-0"),
    ({"zone": "eu-1"}, "gpu-7", "gpu-7"),
    (None, None, "a" * 12),
    ({"argus.node": ""}, "", "a" * 12),
])
def test_name_of(labels, node_name, expected) -> None:
    assert name_of(labels, node_name, ID_A) == expected


def test_a_shared_node_name_gives_way_to_the_id() -> None:
    assert unique_names([(ID_A, {}, "127.0.0.1"), (ID_B, {}, "127.0.0.1")]) == [
        "a" * 12, "b" * 12]
    assert unique_names([(ID_A, {"argus.node": "w1"}, "127.0.0.1"),
                         (ID_B, {}, "127.0.0.1")]) == ["w1", "127.0.0.1"]


@pytest.mark.parametrize(("reason", "required", "problem"), [
    ("bad fan", True, None), (None, False, None), ("", True, "a reason is required"),
    ("  ", True, "a reason is required"), ("x" * 201, True, "at most 200"),
    ("two\nlines", True, "printable"), ("tab\there", True, "printable"),
    (3, True, "must be a string"), ("é ok", True, None),
])
def test_reason_problem(reason, required, problem) -> None:
    found = reason_problem(reason, required=required)
    assert (found is None) if problem is None else (problem in found)
