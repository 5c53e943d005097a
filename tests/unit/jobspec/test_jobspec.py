"""JobSpec parsing and validation: every rule, with the full list of details asserted."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from service.config import Settings
from service.config_load import settings_from_mapping
from service.jobspec.model import JobSpec, JobSpecError
from service.jobspec.spec import parse_jobspec

SETTINGS = Settings()  # shared_root /private, allowed roots (/private,)

PPO: dict[str, Any] = {
    "workload": "ppo",
    "code_path": "/private/code/verl",
    "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
    "train_file": "/private/datasets/gsm8k/train.parquet",
    "val_file": "/private/datasets/gsm8k/test.parquet",
    "nnodes": 2,
    "n_gpus_per_node": 4,
}


def _yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


def _parse(doc: Any, settings: Settings = SETTINGS) -> JobSpec:
    return parse_jobspec(_yaml(doc), settings)


def _details(text: str | bytes, settings: Settings = SETTINGS) -> list[dict[str, Any]]:
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(text, settings)
    assert info.value.status == 400
    return info.value.details


def _errors(doc: Any) -> list[tuple[str, str]]:
    return [(d["field"], d["message"]) for d in _details(_yaml(doc))]


_DROP = object()  # as a value in _with(): leave the field out


def _with(**changes: Any) -> dict[str, Any]:
    doc = {**PPO, **changes}
    return {k: v for k, v in doc.items() if v is not _DROP}


# -- valid specs ---------------------------------------------------------------------


def test_minimal_ppo_spec_fills_defaults() -> None:
    spec = _parse(PPO)
    assert spec == JobSpec(
        workload="ppo",
        code_path="/private/code/verl",
        model_id="Qwen/Qwen2.5-0.5B-Instruct",
        train_file="/private/datasets/gsm8k/train.parquet",
        val_file="/private/datasets/gsm8k/test.parquet",
        nnodes=2,
        n_gpus_per_node=4,
        total_epochs=1,
        total_training_steps=None,
        save_freq=None,
        test_freq=None,
        trainer_device=None,
        overrides=(),
    )
    assert spec.total_gpus == 8


def test_full_spec_keeps_every_value_and_normalises_paths() -> None:
    doc = _with(
        workload="grpo",
        submission_id="whatever-the-client-sent",
        code_path="/private/code/./verl/",
        model_id="/private/models/../models/qwen",
        train_file="//private/datasets/train.parquet",
        total_epochs=3,
        total_training_steps=100,
        save_freq=-1,
        test_freq=0,
        overrides=["++a.b=1", "~c.d", "e.f[0]=x y", "+g=", "h_1.i2[10]='q' \"r\" ; $(s)"],
    )
    spec = _parse(doc)
    assert spec.workload == "grpo"
    assert spec.code_path == "/private/code/verl"
    assert spec.model_id == "/private/models/qwen"
    assert spec.train_file == "/private/datasets/train.parquet"
    assert (spec.total_epochs, spec.total_training_steps) == (3, 100)
    assert (spec.save_freq, spec.test_freq) == (-1, 0)
    assert spec.overrides == tuple(doc["overrides"])


def test_submission_id_is_accepted_and_ignored() -> None:
    assert _parse(_with(submission_id="my-own-id")) == _parse(PPO)
    assert _parse(_with(submission_id="")) == _parse(PPO)  # as in seed 002's example


def test_null_optional_fields_mean_defaults() -> None:
    doc = _with(total_epochs=None, total_training_steps=None, save_freq=None,
                test_freq=None, overrides=None, submission_id=None, trainer_device=None)
    assert _parse(doc) == _parse(PPO)


def test_description_is_an_optional_note_of_at_most_500_characters() -> None:
    assert _parse(_with(description="lr sweep, run 3")).description == "lr sweep, run 3"
    assert _parse(PPO).description is None and _parse(_with(description="")).description is None
    with pytest.raises(JobSpecError) as long:
        _parse(_with(description="x" * 501))
    assert long.value.details == [{"field": "description",
                                   "message": "must be at most 500 characters long"}]
    assert _parse(_with(description="y" * 500)).description == "y" * 500


@pytest.mark.parametrize("priority", [-1000, -1, 0, 7, 1000])
def test_priority_is_kept_and_omitted_means_the_default(priority: int) -> None:
    assert _parse(_with(priority=priority)).priority == priority
    assert _parse(PPO).priority is None  # the service fills in the configured default
    assert _parse(_with(priority=None)).priority is None


def test_max_runtime_s_is_kept_and_omitted_means_the_default() -> None:
    assert _parse(_with(max_runtime_s=3600)).max_runtime_s == 3600
    assert _parse(_with(max_runtime_s=None)).max_runtime_s is None
    assert _parse(PPO).max_runtime_s is None  # the service fills in the configured default


def test_sft_may_omit_val_file_and_pick_a_device() -> None:
    spec = _parse(_with(workload="sft", val_file=_DROP, trainer_device="cpu"))
    assert (spec.val_file, spec.trainer_device) == (None, "cpu")
    spec = _parse(_with(workload="sft", val_file=None, trainer_device="cuda"))
    assert (spec.val_file, spec.trainer_device) == (None, "cuda")


def test_bytes_and_text_bodies_parse_alike() -> None:
    text = _yaml(PPO)
    assert parse_jobspec(text.encode(), SETTINGS) == parse_jobspec(text, SETTINGS)
    assert parse_jobspec(b"\xef\xbb\xbf" + text.encode(), SETTINGS) == parse_jobspec(
        text, SETTINGS
    )


def test_configured_allowed_roots_replace_the_shared_root() -> None:
    settings = settings_from_mapping(
        {"v2": {"jobspec": {"allowed_roots": ["/data/a", "/mnt/models/"]}}}
    )
    spec = _parse(
        _with(code_path="/data/a/verl", model_id="/mnt/models/qwen",
              train_file="/data/a/t.parquet", val_file="/data/a/v.parquet"),
        settings,
    )
    assert spec.model_id == "/mnt/models/qwen"
    assert _details(_yaml(PPO), settings) == [
        {"field": f, "message": f"{PPO[f]!r} is outside the allowed roots (/data/a, /mnt/models)"}
        for f in ("code_path", "train_file", "val_file")
    ]


def test_to_dict_is_json_safe_and_round_trips() -> None:
    spec = _parse(_with(overrides=["a.b=1"], total_training_steps=5))
    data = json.loads(json.dumps(spec.to_dict()))
    assert data["overrides"] == ["a.b=1"]
    assert JobSpec.from_dict(data) == spec


# -- field rules, one table ------------------------------------------------------------

ROOT_MSG = "is outside the allowed roots (/private)"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        # unknown fields, each named
        ({"gpus": 8, "Nnodes": 1}, [
            ("gpus", "unknown field (known fields: workload, submission_id, code_path, "
                     "model_id, train_file, val_file, nnodes, n_gpus_per_node, total_epochs, "
                     "total_training_steps, save_freq, test_freq, trainer_device, overrides, "
                     "priority, max_runtime_s, max_attempts, labels, after, on_unsatisfiable, "
                     "description)"),
            ("Nnodes", "unknown field (known fields: workload, submission_id, code_path, "
                       "model_id, train_file, val_file, nnodes, n_gpus_per_node, total_epochs, "
                       "total_training_steps, save_freq, test_freq, trainer_device, overrides, "
                     "priority, max_runtime_s, max_attempts, labels, after, on_unsatisfiable, "
                     "description)"),
        ]),
        # workload
        ({"workload": "dpo"},
         [("workload", "must be one of ppo, grpo, sft, got 'dpo' (a string)")]),
        ({"workload": ["ppo"]}, [("workload", "must be a string, got a list")]),
        # integers: bool is not int, floats and strings are not ints, ranges
        ({"nnodes": True}, [("nnodes", "must be an integer from 1 to 1024, got true (a boolean)")]),
        ({"nnodes": "2"}, [("nnodes", "must be an integer from 1 to 1024, got '2' (a string)")]),
        ({"nnodes": 2.5}, [("nnodes", "must be an integer from 1 to 1024, got 2.5 (a number)")]),
        ({"nnodes": None}, [("nnodes", "must be an integer from 1 to 1024, got null")]),
        ({"nnodes": 0}, [("nnodes", "must be from 1 to 1024, got 0")]),
        ({"nnodes": 1025}, [("nnodes", "must be from 1 to 1024, got 1025")]),
        ({"n_gpus_per_node": 65}, [("n_gpus_per_node", "must be from 1 to 64, got 65")]),
        ({"n_gpus_per_node": False},
         [("n_gpus_per_node", "must be an integer from 1 to 64, got false (a boolean)")]),
        ({"total_epochs": 0}, [("total_epochs", "must be from 1 to 100000, got 0")]),
        ({"priority": 1001}, [("priority", "must be from -1000 to 1000, got 1001")]),
        ({"priority": "high"},
         [("priority", "must be an integer from -1000 to 1000, got 'high' (a string)")]),
        ({"priority": True},
         [("priority", "must be an integer from -1000 to 1000, got true (a boolean)")]),
        # max_runtime_s: whole seconds, 1 s .. 30 days
        ({"max_runtime_s": 0}, [("max_runtime_s", "must be from 1 to 2592000, got 0")]),
        ({"max_runtime_s": 2592001},
         [("max_runtime_s", "must be from 1 to 2592000, got 2592001")]),
        ({"max_runtime_s": "1h"},
         [("max_runtime_s", "must be an integer from 1 to 2592000, got '1h' (a string)")]),
        ({"max_runtime_s": 90.5},
         [("max_runtime_s", "must be an integer from 1 to 2592000, got 90.5 (a number)")]),
        ({"total_training_steps": 0},
         [("total_training_steps", "must be from 1 to 1000000000, got 0")]),
        ({"save_freq": -2}, [("save_freq", "must be from -1 to 1000000000, got -2")]),
        ({"test_freq": "off"},
         [("test_freq", "must be an integer from -1 to 1000000000, got 'off' (a string)")]),
        # paths
        ({"code_path": "verl"}, [("code_path", "must be an absolute path, got 'verl' (a string)")]),
        ({"code_path": "~/verl"},
         [("code_path", "must be an absolute path, got '~/verl' (a string)")]),
        ({"train_file": "/etc/passwd"}, [("train_file", f"'/etc/passwd' {ROOT_MSG}")]),
        ({"train_file": "/private/../etc/passwd"}, [("train_file", f"'/etc/passwd' {ROOT_MSG}")]),
        ({"train_file": "/privateer/x"}, [("train_file", f"'/privateer/x' {ROOT_MSG}")]),
        ({"val_file": "/private/a b;c"},
         [("val_file", "contains characters not allowed in paths: ' ;' "
                       "(allowed: letters, digits and . _ - + @ /)")]),
        ({"code_path": "/private/verl:/tmp/evil"},
         [("code_path", "contains characters not allowed in paths: ':' "
                        "(allowed: letters, digits and . _ - + @ /)")]),
        ({"code_path": ""}, [("code_path", "must not be empty")]),
        ({"code_path": 5}, [("code_path", "must be a string, got 5")]),
        ({"code_path": "/private/" + "x" * 4096},
         [("code_path", "must be at most 4096 characters long")]),
        # model_id: HF repo id or absolute path
        ({"model_id": "Qwen"},
         [("model_id", "must be an absolute path or a Hugging Face repo id 'org/name', "
                       "got 'Qwen' (a string)")]),
        ({"model_id": "org/name/extra"},
         [("model_id", "must be an absolute path or a Hugging Face repo id 'org/name', "
                       "got 'org/name/extra' (a string)")]),
        ({"model_id": "org/-name"},
         [("model_id", "must be an absolute path or a Hugging Face repo id 'org/name', "
                       "got 'org/-name' (a string)")]),
        ({"model_id": "org/na..me"},
         [("model_id", "must be an absolute path or a Hugging Face repo id 'org/name', "
                       "got 'org/na..me' (a string)")]),
        ({"model_id": "./models/q"},
         [("model_id", "must be an absolute path or a Hugging Face repo id 'org/name', "
                       "got './models/q' (a string)")]),
        ({"model_id": "/models/q"}, [("model_id", f"'/models/q' {ROOT_MSG}")]),
        # val_file required for ppo/grpo
        ({"val_file": _DROP}, [("val_file", "required for workload ppo")]),
        ({"workload": "grpo", "val_file": None}, [("val_file", "required for workload grpo")]),
        # trainer_device: sft only, cpu|cuda
        ({"trainer_device": "cpu"}, [("trainer_device", "only allowed for workload sft, not ppo")]),
        ({"workload": "sft", "trainer_device": "tpu"},
         [("trainer_device", "must be one of cpu, cuda or null, got 'tpu' (a string)")]),
        # submission_id still has to be a clean string
        ({"submission_id": 12}, [("submission_id", "must be a string, got 12")]),
    ],
)
def test_field_rules(changes: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert _errors(_with(**changes)) == expected


@pytest.mark.parametrize(
    "field", ["workload", "code_path", "model_id", "train_file", "nnodes", "n_gpus_per_node"]
)
def test_each_required_field(field: str) -> None:
    assert _errors(_with(**{field: _DROP})) == [(field, "required field is missing")]


def test_three_errors_are_all_reported() -> None:
    doc = _with(nnodes=True, code_path="relative/verl", colour="blue")
    assert _errors(doc) == [
        ("colour", "unknown field (known fields: workload, submission_id, code_path, "
                   "model_id, train_file, val_file, nnodes, n_gpus_per_node, total_epochs, "
                   "total_training_steps, save_freq, test_freq, trainer_device, overrides, "
                     "priority, max_runtime_s, max_attempts, labels, after, on_unsatisfiable, "
                     "description)"),
        ("code_path", "must be an absolute path, got 'relative/verl' (a string)"),
        ("nnodes", "must be an integer from 1 to 1024, got true (a boolean)"),
    ]


def test_empty_mapping_reports_every_required_field() -> None:
    assert _errors({}) == [
        (f, "required field is missing")
        for f in ("workload", "code_path", "model_id", "train_file", "nnodes", "n_gpus_per_node")
    ]


def test_error_message_and_details_agree() -> None:
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(_yaml(_with(nnodes=0, n_gpus_per_node=0)), SETTINGS)
    assert str(info.value) == (
        "invalid JobSpec: nnodes: must be from 1 to 1024, got 0; "
        "n_gpus_per_node: must be from 1 to 64, got 0"
    )


# -- control characters in every string field ----------------------------------------

STRING_FIELDS = ["workload", "submission_id", "code_path", "model_id", "train_file",
                 "val_file", "trainer_device"]


@pytest.mark.parametrize("field", STRING_FIELDS)
@pytest.mark.parametrize(
    ("char", "code"), [("\n", "U+000A"), ("\r", "U+000D"), ("\t", "U+0009"),
                       ("\x00", "U+0000"), ("\x1b", "U+001B"), ("\u2028", "U+2028")]
)
def test_control_characters_are_rejected_in_every_string_field(
    field: str, char: str, code: str
) -> None:
    base = _with(workload="sft")  # sft accepts trainer_device
    value = f"/private/x{char}touch /tmp/pwned"
    if field == "trainer_device":
        value = f"cpu{char}"
    doc = {**base, field: value}
    # JSON is valid YAML and carries any character as an escape, exactly as a client would.
    details = _details(json.dumps(doc))
    assert [(d["field"], d["message"]) for d in details] == [
        (field, f"must not contain control or non-printable characters (found {code})")
    ]


# -- overrides -------------------------------------------------------------------------

OVERRIDE_SHAPE = ("must be a Hydra override 'key=value' (key: dotted identifiers with "
                  "optional [index], optionally led by +, ++ or ~), got ")


@pytest.mark.parametrize(
    ("workload", "items", "expected"),
    [
        ("ppo", "a=b",
         [("overrides", "must be a list of 'key=value' strings, got 'a=b' (a string)")]),
        ("ppo", ["a.b=1", 3, None], [("overrides[1]", "must be a string, got 3"),
                                     ("overrides[2]", "must be a string, got null")]),
        ("ppo", ["a.b=1\ntouch x"],
         [("overrides[0]", "must not contain control or non-printable characters (found U+000A)")]),
        ("ppo", ["a.b=1\x00"],
         [("overrides[0]", "must not contain control or non-printable characters (found U+0000)")]),
        ("ppo", ["a.b"], [("overrides[0]", OVERRIDE_SHAPE + "'a.b' (a string)")]),
        ("ppo", ["+a.b"], [("overrides[0]", OVERRIDE_SHAPE + "'+a.b' (a string)")]),
        ("ppo", ["a b=1"], [("overrides[0]", OVERRIDE_SHAPE + "'a b=1' (a string)")]),
        ("ppo", [" a=1"], [("overrides[0]", OVERRIDE_SHAPE + "' a=1' (a string)")]),
        ("ppo", ["a..b=1"], [("overrides[0]", OVERRIDE_SHAPE + "'a..b=1' (a string)")]),
        ("ppo", ["1a=1"], [("overrides[0]", OVERRIDE_SHAPE + "'1a=1' (a string)")]),
        ("ppo", ["+++a=1"], [("overrides[0]", OVERRIDE_SHAPE + "'+++a=1' (a string)")]),
        ("ppo", ["a[x]=1"], [("overrides[0]", OVERRIDE_SHAPE + "'a[x]=1' (a string)")]),
        ("ppo", ["a.b;touch=1"], [("overrides[0]", OVERRIDE_SHAPE + "'a.b;touch=1' (a string)")]),
        ("ppo", ["$(id)=1"], [("overrides[0]", OVERRIDE_SHAPE + "'$(id)=1' (a string)")]),
        ("ppo", [""], [("overrides[0]", "must not be empty")]),
        # keys Argus owns: exact, with prefixes, with an index, and parents of them
        ("ppo", ["trainer.nnodes=4"],
         [("overrides[0]", "'trainer.nnodes' is set by Argus; use the JobSpec field 'nnodes'")]),
        ("ppo", ["++trainer.n_gpus_per_node=8"],
         [("overrides[0]", "'trainer.n_gpus_per_node' is set by Argus; "
                           "use the JobSpec field 'n_gpus_per_node'")]),
        ("ppo", ["~trainer.default_local_dir"],
         [("overrides[0]", "'trainer.default_local_dir' is set by Argus; "
                           "it cannot be overridden")]),
        ("ppo", ["trainer.experiment_name=mine"],
         [("overrides[0]", "'trainer.experiment_name' is set by Argus; it cannot be overridden")]),
        ("ppo", ["data.train_files[0]=/x"],
         [("overrides[0]", "'data.train_files' is set by Argus; "
                           "use the JobSpec field 'train_file'")]),
        ("ppo", ["critic.model.path=/x"],
         [("overrides[0]", "'critic.model.path' is set by Argus; "
                           "use the JobSpec field 'model_id'")]),
        ("ppo", ["algorithm.adv_estimator=grpo"],
         [("overrides[0]", "'algorithm.adv_estimator' is set by Argus; "
                           "it cannot be overridden")]),
        ("sft", ["trainer.device=cpu", "model.path=/x"],
         [("overrides[0]", "'trainer.device' is set by Argus; "
                           "use the JobSpec field 'trainer_device'"),
          ("overrides[1]", "'model.path' is set by Argus; use the JobSpec field 'model_id'")]),
        ("ppo", ["data={}"],
         [("overrides[0]", "'data' would replace keys set by Argus: "
                           "data.train_files, data.val_files")]),
        ("grpo", ["~actor_rollout_ref.model"],
         [("overrides[0]", "'actor_rollout_ref.model' would replace keys set by Argus: "
                           "actor_rollout_ref.model.path")]),
    ],
)
def test_override_rules(workload: str, items: Any, expected: list[tuple[str, str]]) -> None:
    assert _errors(_with(workload=workload, trainer_device=_DROP, overrides=items)) == expected


def test_overrides_of_keys_owned_elsewhere_are_fine() -> None:
    # grpo sets no critic; ppo has no top-level model.path; trainer.* siblings are free.
    items = ["critic.model.path=/private/x", "model.path=/private/y", "trainer.nnodes_extra=1",
             "trainer.val_before_train=False", "data.max_prompt_length=512"]
    assert _parse(_with(workload="grpo", overrides=items)).overrides == tuple(items)


def test_the_override_policy_applies_with_every_other_error() -> None:
    doc = _with(nnodes=0, overrides=[
        "hydra.run.dir=/etc", "+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH=/x",
        "~transfer_queue", "custom_reward_function.path=/etc/evil.py",
        "custom_reward_function.path=/private/rewards/fn.py"])
    errors = _errors(doc)
    assert [field for field, _ in errors] == [
        "nnodes", "overrides[0]", "overrides[1]", "overrides[2]", "overrides[3]"]
    assert errors[1][1] == "'hydra.run.dir' is set by Argus; it cannot be overridden"
    assert errors[4][1] == ("'custom_reward_function.path' takes a path: '/etc/evil.py' "
                            "is outside the allowed roots (/private)")


def test_owned_key_check_is_skipped_when_workload_is_invalid() -> None:
    assert _errors(_with(workload="dpo", overrides=["trainer.nnodes=4"])) == [
        ("workload", "must be one of ppo, grpo, sft, got 'dpo' (a string)"),
    ]


def test_too_many_overrides() -> None:
    assert _errors(_with(overrides=[f"a.b{i}=1" for i in range(257)])) == [
        ("overrides", "at most 256 items, got 257"),
    ]


# -- the body itself ---------------------------------------------------------------------


def test_malformed_yaml_reports_line_and_column() -> None:
    text = "workload: ppo\nnnodes: [1, 2\ncode_path: /private/x\n"
    details = _details(text)
    assert len(details) == 1
    assert details[0]["field"] == "body"
    assert (details[0]["line"], details[0]["column"]) == (3, 10)
    assert details[0]["message"].startswith("malformed YAML: while parsing a flow sequence")
    assert details[0]["message"].endswith("(line 3, column 10)")


@pytest.mark.parametrize(
    ("text", "got"),
    [("", "an empty document"), ("# only a comment\n", "an empty document"),
     ("- workload: ppo\n", "a list"), ("ppo\n", "'ppo' (a string)"), ("42", "42")],
)
def test_non_mapping_documents(text: str, got: str) -> None:
    assert _details(text) == [
        {"field": "body", "message": f"must be a YAML mapping of JobSpec fields, got {got}"}
    ]


def test_duplicate_fields_are_refused() -> None:
    text = _yaml(PPO) + "nnodes: 1\nnnodes: 3\n"
    assert _details(text) == [
        {"field": "nnodes", "message": "field given more than once (again on line 8)",
         "line": 8, "column": 1},
        {"field": "nnodes", "message": "field given more than once (again on line 9)",
         "line": 9, "column": 1},
    ]


def test_custom_tags_are_not_constructed(tmp_path) -> None:
    canary = tmp_path / "canary"
    text = f"!!python/object/apply:os.system ['touch {canary}']\n"
    assert _details(text) == [{
        "field": "body", "line": 1, "column": 1,
        "message": "explicit tags (tag:yaml.org,2002:python/object/apply:os.system) are not "
                   "accepted (line 1, column 1)"}]
    assert not canary.exists()


def test_several_documents_are_refused() -> None:
    details = _details(_yaml(PPO) + "---\n" + _yaml(PPO))
    assert [d["field"] for d in details] == ["body"]
    assert "expected a single document" in details[0]["message"]


def test_invalid_utf8_is_refused() -> None:
    assert _details(b"workload: \xff\xfe\n") == [
        {"field": "body", "message": "body is not valid UTF-8 (byte 10)"}
    ]


def test_nul_byte_in_body_is_refused() -> None:
    details = _details(b"workload: ppo\x00\n")
    assert [d["field"] for d in details] == ["body"]
    assert "unacceptable character #x0000" in details[0]["message"]


@pytest.mark.parametrize("as_bytes", [True, False])
def test_body_over_the_limit_is_413(as_bytes: bool) -> None:
    settings = settings_from_mapping({"v2": {"jobspec": {"max_body_bytes": 64}}})
    text = _yaml(PPO)  # > 64 bytes
    body: str | bytes = text.encode() if as_bytes else text
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(body, settings)
    assert info.value.status == 413
    assert info.value.details == [
        {"field": "body", "message": f"body is {len(text.encode())} bytes, "
                                     "over the limit of 64 bytes"}
    ]


def test_body_limit_counts_utf8_bytes_not_characters() -> None:
    settings = settings_from_mapping({"v2": {"jobspec": {"max_body_bytes": 10}}})
    with pytest.raises(JobSpecError) as info:
        parse_jobspec("a: ééééé", settings)  # 8 characters, 13 bytes
    assert info.value.status == 413


def test_integral_numbers_are_integers_as_the_json_schema_says() -> None:
    """JSON has one number type and JSON Schema's "integer" takes 2.0: so does the
    validator (the OpenAPI document draws such specs); 2.5 stays refused."""
    from service.jobspec.spec import parse_jobspec_json

    doc = _with(nnodes=2.0, priority=0.0, max_runtime_s=60.0, save_freq=1.0)
    spec = parse_jobspec_json(json.dumps(doc), SETTINGS)
    assert (spec.nnodes, spec.priority, spec.max_runtime_s, spec.save_freq) == (2, 0, 60, 1)
    assert all(type(v) is int for v in (spec.nnodes, spec.priority, spec.max_runtime_s))
    assert [f for f, _ in _errors(_with(nnodes=2.5))] == ["nnodes"]
    assert [f for f, _ in _errors(_with(priority=1e6))] == ["priority"]
