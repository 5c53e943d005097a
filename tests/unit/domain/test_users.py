"""User names, roles, tokens and the authorization rules of a principal (pure)."""

from __future__ import annotations

import hashlib

import pytest

from service.domain.users import (
    MAX_TOKEN_LEN,
    Principal,
    Role,
    display_prefix,
    hash_matches,
    is_user_name,
    label_problem,
    name_problem,
    new_token,
    parse_token_id,
    presentable,
    token_hash,
)


@pytest.mark.parametrize("name", ["a", "alice", "bob-2", "ci_nightly", "a_", "x" * 32,
                                  "a-b-c", "z9"])
def test_valid_names(name: str) -> None:
    assert name_problem(name) is None and is_user_name(name)


@pytest.mark.parametrize(("name", "why"), [
    ("", "not a valid user name"),
    ("Alice", "not a valid user name"),
    ("1alice", "not a valid user name"),
    ("-alice", "not a valid user name"),
    ("_alice", "not a valid user name"),
    ("x" * 33, "not a valid user name"),
    ("al ice", "not a valid user name"),
    ("al.ice", "not a valid user name"),
    ("al/ice", "not a valid user name"),
    ("ali--ce", "not a valid user name"),  # "--" separates the attempt in submission ids
    ("alice-", "not a valid user name"),  # would put "--" into a task id
    ("alicé", "not a valid user name"),
    ("all", "reserved"),
    ("me", "reserved"),
    ("mine", "reserved"),
    (None, "must be a string"),
    (7, "must be a string"),
])
def test_invalid_names_say_why(name: object, why: str) -> None:
    problem = name_problem(name)
    assert problem is not None and why in problem
    assert not is_user_name(name)


def test_new_tokens_are_unique_random_and_parse_back() -> None:
    tokens = [new_token() for _ in range(200)]
    assert len({t.secret for t in tokens}) == 200
    for t in tokens[:20]:
        assert t.secret.startswith(f"argus_{t.token_id}_")
        assert len(t.secret) == len("argus_") + 12 + 1 + 43
        assert parse_token_id(t.secret) == t.token_id
        assert t.sha256 == hashlib.sha256(t.secret.encode()).hexdigest() == token_hash(t.secret)
        assert hash_matches(t.secret, t.sha256)
        assert not hash_matches(t.secret[:-1] + ("A" if t.secret[-1] != "A" else "B"),
                                t.sha256)
        assert display_prefix(t.token_id) == f"argus_{t.token_id}"
        assert t.secret[len(display_prefix(t.token_id)) + 1:] not in display_prefix(t.token_id)


@pytest.mark.parametrize("text", [
    "", "argus_", "argus_0123456789ab", "argus_0123456789ab_short",
    "argus_0123456789AB_" + "a" * 43, "argus_0123456789ab_" + "a" * 44,
    "ARGUS_0123456789ab_" + "a" * 43, "bearer argus_0123456789ab_" + "a" * 43,
    "argus_0123456789ab_" + "a" * 42 + "!", "the-bootstrap-token",
])
def test_parse_token_id_refuses_other_shapes(text: str) -> None:
    assert parse_token_id(text) is None


@pytest.mark.parametrize(("text", "ok"), [
    ("a", True),
    ("test-token-不是秘密", True),  # a bootstrap token may be any printable text
    ("x" * MAX_TOKEN_LEN, True),
    ("x" * (MAX_TOKEN_LEN + 1), False),
    ("", False),
    ("tab\tinside", False),
    ("nul\x00", False),
    ("bad\udcffbyte", False),  # what an undecodable header byte becomes
])
def test_presentable(text: str, ok: bool) -> None:
    assert presentable(text) is ok


@pytest.mark.parametrize(("label", "ok"), [("ci", True), ("laptop 2", True), ("", False),
                                           ("   ", False), ("x" * 65, False),
                                           ("a\nb", False), (3, False)])
def test_label_problem(label: object, ok: bool) -> None:
    assert (label_problem(label) is None) is ok


@pytest.mark.parametrize(("who", "owner", "may"), [
    (Principal("alice", Role.USER), "alice", True),
    (Principal("alice", Role.USER), "bob", False),
    (Principal("alice", Role.USER), None, False),  # an ownerless task: admins only
    (Principal("root", Role.ADMIN), "bob", True),
    (Principal("root", Role.ADMIN), None, True),
])
def test_may_act_on_a_task(who: Principal, owner: str | None, may: bool) -> None:
    assert who.may_act_on(owner) is may


@pytest.mark.parametrize(("who", "name", "may"), [
    (Principal("alice", Role.USER), "alice", True),
    (Principal("alice", Role.USER), "bob", False),
    (Principal("root", Role.ADMIN), "bob", True),
])
def test_may_manage_a_user(who: Principal, name: str, may: bool) -> None:
    assert who.may_manage(name) is may
