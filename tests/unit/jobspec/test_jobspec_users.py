"""The users' trees are private: a JobSpec reads the common roots and its own user's tree.

Every path field and path-valued override is checked; a path in another user's tree is a
400 that names the field and the tree, whatever the allowed roots say.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from service.config import Settings
from service.jobspec.model import JobSpec, JobSpecError
from service.jobspec.schema import jobspec_json_schema
from service.jobspec.spec import parse_jobspec

SETTINGS = Settings()  # shared_root /private, allowed roots (/private,)
BASE: dict[str, Any] = {
    "workload": "ppo",
    "code_path": "/private/code/verl",
    "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
    "train_file": "/private/datasets/gsm8k/train.parquet",
    "val_file": "/private/datasets/gsm8k/test.parquet",
    "nnodes": 1,
    "n_gpus_per_node": 4,
}
PATH_FIELDS = ["code_path", "model_id", "train_file", "val_file"]


def parse(user: str | None, settings: Settings = SETTINGS, **changes: Any) -> JobSpec:
    return parse_jobspec(yaml.safe_dump({**BASE, **changes}), settings, user)


def details(user: str | None, settings: Settings = SETTINGS, **changes: Any
            ) -> dict[str, str]:
    with pytest.raises(JobSpecError) as info:
        parse(user, settings, **changes)
    assert info.value.status == 400
    return {d["field"]: d["message"] for d in info.value.details}


@pytest.mark.parametrize("field", PATH_FIELDS)
def test_own_tree_is_readable(field: str) -> None:
    path = "/private/users/alice/data/x.parquet"
    assert getattr(parse("alice", **{field: path}), field) == path


@pytest.mark.parametrize("field", PATH_FIELDS)
@pytest.mark.parametrize("path", [
    "/private/users/bob/data/x.parquet",
    "/private/users/bob",
    "/private/users/alice/../bob/x",  # normalised first
    "/private/users/alicex/x",  # a prefix of a name is another name
])
def test_another_users_tree_is_refused_naming_the_field(field: str, path: str) -> None:
    found = details("alice", **{field: path})
    assert list(found) == [field]
    message = found[field]
    assert "user bob" in message or "user alicex" in message
    assert "only its own user's tree (/private/users/alice)" in message


def test_the_users_root_itself_is_refused() -> None:
    found = details("alice", train_file="/private/users")
    assert "the users' trees (/private/users)" in found["train_file"]


def test_without_a_user_no_tree_is_readable() -> None:
    found = details(None, train_file="/private/users/alice/x")
    assert "no user's tree" in found["train_file"]


def test_common_roots_stay_readable() -> None:
    assert parse("alice").train_file == BASE["train_file"]


def test_own_tree_readable_even_outside_the_allowed_roots() -> None:
    settings = Settings(allowed_roots=("/data",))
    assert parse("alice", settings, code_path="/data/verl",
                 train_file="/private/users/alice/t.parquet",
                 val_file="/data/v.parquet").train_file == "/private/users/alice/t.parquet"
    found = details("alice", settings, code_path="/private/code/verl")
    assert "outside the allowed roots (/data) and the job's own user's tree" in found[
        "code_path"]


def test_an_allowed_root_inside_the_users_tree_does_not_open_it() -> None:
    settings = Settings(allowed_roots=("/private", "/private/users/bob"))
    assert "user bob" in details("alice", settings, train_file="/private/users/bob/x")[
        "train_file"]


@pytest.mark.parametrize("override", [
    "data.custom_cls.path=/private/users/bob/ds.py",
    "custom_reward_function.path=file:///private/users/bob/reward.py",
    "reward_model.model.path=/private/users/bob/model",
    "+argus.x=/private/users/bob/anything",  # any value that is a path
    "+argus.dump_dirs=[/private/data/a,/private/users/bob/b]",
])
def test_path_valued_overrides_follow_the_same_rule(override: str) -> None:
    found = details("alice", overrides=[override])
    assert list(found) == ["overrides[0]"] and "user bob" in found["overrides[0]"]
    own = override.replace("/users/bob/", "/users/alice/")
    assert parse("alice", overrides=[own]).overrides == (own,)


def test_schema_leaves_the_users_trees_out() -> None:
    import jsonschema

    jsonschema_validator = jsonschema.Draft202012Validator(
        jobspec_json_schema(("/private",), "/private/users"))
    assert jsonschema_validator.is_valid(BASE)
    assert not jsonschema_validator.is_valid({**BASE, "train_file": "/private/users/a/x"})
    assert not jsonschema_validator.is_valid({**BASE, "train_file": "/private/users"})
    assert jsonschema_validator.is_valid({**BASE, "train_file": "/private/usersx/a"})
