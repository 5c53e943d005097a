"""Settings: defaults, the dev config, precedence, and a clear error for each bad key."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from service.config import WORKLOADS, ConfigError, Settings, thaw
from service.config_load import load_settings, settings_from_mapping
from service.policy.quotas import Limits

ROOT = Path(__file__).resolve().parents[3]


def test_dev_config_loads_with_seed_paths() -> None:
    s = load_settings(ROOT / "configs" / "dev.yaml", environ={})
    assert s.shared_root == "/private"
    assert s.resolved_db_path == "/private/common/db/mvp_v2.sqlite3"
    assert s.token_env == "ARGUS_API_TOKEN"
    assert dict(s.entrypoint_resources) == {"worker_node": 1.0}
    assert s.scheduler.retry_interval_s == 60.0
    assert s.scheduler.cpus_per_gpu == 3.0
    assert any("required_node_resource=worker_node" in o for o in s.default_overrides["ppo"])


def test_defaults_derive_paths_from_shared_root() -> None:
    s = settings_from_mapping({"ray": {"shared_root": "/data/argus"}})
    assert s.resolved_db_path == "/data/argus/common/db/mvp_v2.sqlite3"
    assert s.resolved_allowed_roots == ("/data/argus",)
    assert s.resolved_gcs_address == "127.0.0.1:6379"


def test_gcs_address_defaults_to_job_server_host() -> None:
    s = settings_from_mapping({"ray": {"address": "http://10.1.2.3:8265"}})
    assert s.resolved_gcs_address == "10.1.2.3:6379"


def test_settings_are_frozen_deeply() -> None:
    s = settings_from_mapping({"ray": {"runtime_env": {"env_vars": {"A": "1"}}}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.shared_root = "/x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.runtime_env["env_vars"]["A"] = "2"  # type: ignore[index]
    assert thaw(s.runtime_env) == {"env_vars": {"A": "1"}}


def test_environment_overrides_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("ray: {address: 'http://a:8265'}\nv2: {api: {port: 9000}}\n")
    s = load_settings(cfg, environ={"ARGUS_RAY_ADDRESS": "http://b:8265", "ARGUS_API_PORT": "9100"})
    assert s.ray_address == "http://b:8265"
    assert s.api_port == 9100
    assert s.with_overrides(api_port=9200, api_host=None).api_port == 9200


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ([1, 2], "top level must be a mapping"),
        ({"ray": []}, "ray: must be a mapping"),
        ({"ray": {"shared_root": "relative/dir"}}, "ray.shared_root: must be an absolute path"),
        ({"ray": {"entrypoint_num_cpus": "one"}}, "ray.entrypoint_num_cpus: must be a number"),
        ({"ray": {"entrypoint_num_cpus": -1}}, "ray.entrypoint_num_cpus: must be >= 0"),
        ({"ray": {"entrypoint_resources": {"worker_node": True}}}, "must be a number"),
        ({"v2": {"api": {"port": "80"}}}, "v2.api.port: must be a number"),
        ({"v2": {"scheduler": {"tick_s": 0}}}, "v2.scheduler.tick_s: must be > 0"),
        ({"v2": {"scheduler": {"retry_backoff": "linear"}}}, "v2.scheduler.retry_backoff"),
        ({"v2": {"scheduler": {"max_attempts": 0}}}, "v2.scheduler.max_attempts: must be >= 1"),
        ({"v2": {"scheduler": {"bogus": 1}}}, "unknown keys ['bogus']"),
        ({"v2": {"jobspec": {"allowed_roots": ["rel"]}}}, "v2.jobspec.allowed_roots"),
        ({"v2": {"verl": {"default_overrides": {"dpo": []}}}}, "v2.verl.default_overrides"),
        ({"v2": {"task_id_prefix": "MVP-2"}}, "v2.task_id_prefix: must be 1-32 lowercase"),
        ({"v2": {"auth": {"token_env": ""}}}, "v2.auth.token_env: must be a non-empty string"),
        # the scheduling policy
        ({"v2": {"scheduler": {"retry_mode": "later"}}},
         "v2.scheduler.retry_mode: must be 'when_fits' or 'timer'"),
        ({"v2": {"scheduler": {"retry_min_backoff_s": 30, "retry_max_backoff_s": 10}}},
         "retry_max_backoff_s (10) must be >= retry_min_backoff_s (30)"),
        ({"v2": {"scheduler": {"preemption_grace_s": -1}}},
         "v2.scheduler.preemption_grace_s: must be >= 0"),
        ({"v2": {"scheduler": {"gang_size_credit_s": -1}}},
         "v2.scheduler.gang_size_credit_s: must be >= 0"),
        ({"v2": {"scheduler": {"reserve_small_after_s": -1}}},
         "v2.scheduler.reserve_small_after_s: must be >= 0"),
        ({"v2": {"scheduler": {"unreserved_above_share": -1}}},
         "v2.scheduler.unreserved_above_share: must be >= 0"),
        ({"v2": {"scheduler": {"preemption": "yes"}}},
         "v2.scheduler.preemption: must be true or false"),
        ({"v2": {"scheduler": {"fair_share": 1}}}, "v2.scheduler.fair_share: must be true"),
        ({"v2": {"scheduler": {"fair_share_half_life_s": 0}}},
         "v2.scheduler.fair_share_half_life_s: must be > 0 or null"),
        ({"v2": {"scheduler": {"default_max_runtime_s": 0}}},
         "v2.scheduler.default_max_runtime_s: must be >= 1 (seconds) or null"),
        ({"v2": {"scheduler": {"default_max_runtime_s": "1h"}}},
         "v2.scheduler.default_max_runtime_s: must be a number"),
        ({"v2": {"scheduler": {"default_priority": 2000}}},
         "v2.scheduler.default_priority: must be from -1000 to 1000, got 2000"),
        ({"v2": {"scheduler": {"max_user_priority": 1.5}}},
         "v2.scheduler.max_user_priority: must be an integer"),
        ({"v2": {"scheduler": {"default_priority": 10}}},
         "max_user_priority (0) must be >= default_priority (10)"),
        ({"v2": {"users": {"weights": {"alice": 0}}}}, "v2.users.weights.alice: must be > 0"),
        ({"v2": {"users": {"weights": {"alice": "two"}}}}, "v2.users.weights.alice: must be a"),
        ({"v2": {"users": {"weights": {"Bad Name": 2}}}}, "v2.users.weights.Bad Name"),
        ({"v2": {"users": {"weights": [1]}}}, "v2.users.weights: must be a mapping"),
    ],
)
def test_bad_config_names_the_key(doc: object, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        settings_from_mapping(doc)  # type: ignore[arg-type]
    assert needle in str(err.value)


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(tmp_path / "missing.yaml", environ={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("ray: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(bad, environ={})


def test_no_file_means_defaults() -> None:
    assert load_settings(None, environ={}) == Settings()


def test_workload_keys_and_default_overrides_come_from_the_workload_table() -> None:
    from service.domain import workloads

    assert WORKLOADS == workloads.WORKLOAD_NAMES
    assert dict(Settings().default_overrides) == dict(workloads.DEFAULT_OVERRIDES)
    assert Settings().default_overrides["ppo"] == (workloads.TQ_PIN,)
    # an operator's list replaces one workload's defaults; the others keep the table's
    s = settings_from_mapping({"v2": {"verl": {"default_overrides": {"sft": ["a.b=1"]}}}})
    assert s.default_overrides["sft"] == ("a.b=1",)
    assert s.default_overrides["grpo"] == workloads.DEFAULT_OVERRIDES["grpo"]


def test_head_json_from_file_and_from_the_nodes_variable(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("ray: {address: 'http://a:8265', head_json: /shared/ray/head.json}\n")
    assert load_settings(cfg, environ={}).head_json == "/shared/ray/head.json"
    env = {"ARGUS_HEAD_IP_FILE": "/other/head.json"}
    assert load_settings(cfg, environ=env).head_json == "/other/head.json"
    assert load_settings(None, environ={}).head_json is None
    assert settings_from_mapping({"ray": {"head_json": None}}).head_json is None


def test_head_json_must_be_absolute(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ray\.head_json: must be an absolute path"):
        settings_from_mapping({"ray": {"head_json": "shared/head.json"}})
    with pytest.raises(ConfigError, match=r"ray\.head_json: must be a non-empty string"):
        settings_from_mapping({"ray": {"head_json": 3}})
    with pytest.raises(ConfigError, match="ARGUS_HEAD_IP_FILE: must be an absolute path"):
        load_settings(None, environ={"ARGUS_HEAD_IP_FILE": "head.json"})


# -- users --------------------------------------------------------------------------------


def test_users_defaults() -> None:
    users = settings_from_mapping({}).users
    assert (users.bootstrap_admin, users.default_user) == ("admin", "admin")
    assert users.limits_for("anyone") == Limits(0, 0)


def test_user_limits_default_and_per_user_overrides_key_by_key() -> None:
    users = settings_from_mapping({"v2": {"users": {
        "bootstrap_admin": "root", "default_user": "legacy",
        "limits": {"max_running_tasks": 4, "max_gpus": 16},
        "per_user": {"alice": {"max_gpus": 8}, "ci-bot": {"max_running_tasks": 1},
                     "bob": None},
    }}}).users
    assert (users.bootstrap_admin, users.default_user) == ("root", "legacy")
    assert users.limits_for("alice") == Limits(max_running_tasks=4, max_gpus=8)
    assert users.limits_for("ci-bot") == Limits(max_running_tasks=1, max_gpus=16)
    assert users.limits_for("bob") == users.limits_for("carol") == Limits(4, 16)


@pytest.mark.parametrize(("users", "needle"), [
    ({"bootstrap_admin": "Root"}, "v2.users.bootstrap_admin: 'Root' is not a valid user name"),
    ({"default_user": "all"}, "v2.users.default_user: 'all' is reserved"),
    ({"limits": {"max_gpus": -1}}, "v2.users.limits.max_gpus: must be >= 0"),
    ({"limits": {"max_gpu": 1}}, "v2.users.limits: unknown keys ['max_gpu']"),
    ({"limits": [1]}, "v2.users.limits: must be a mapping"),
    ({"per_user": {"bo--b": {"max_gpus": 1}}}, "v2.users.per_user.bo--b: 'bo--b' is not"),
    ({"per_user": {"bob": {"max_gpus": 1.5}}}, "v2.users.per_user.bob.max_gpus: must be an "
                                               "integer"),
    ({"per_user": ["bob"]}, "v2.users.per_user: must be a mapping"),
    ({"admins": ["x"]}, "v2.users: unknown keys ['admins']"),
])
def test_bad_users_config_names_the_key(users: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        settings_from_mapping({"v2": {"users": users}})
    assert needle in str(err.value)


def test_scheduling_policy_keys() -> None:
    s = settings_from_mapping({"v2": {
        "scheduler": {"retry_mode": "timer", "retry_min_backoff_s": 2,
                      "retry_max_backoff_s": 20, "default_priority": -5,
                      "max_user_priority": 10, "fair_share": False,
                      "fair_share_half_life_s": 3600, "preemption": True,
                      "preemption_grace_s": 120, "preempt_without_checkpoint": True,
                      "default_max_runtime_s": 86400, "gang_size_credit_s": 60,
                      "reserve_small_after_s": 1800, "unreserved_above_share": 1.5},
        "users": {"weights": {"alice": 2, "bob": 0.5}}}})
    sched = s.scheduler
    assert (sched.retry_mode, sched.retry_min_backoff_s, sched.retry_max_backoff_s) == (
        "timer", 2.0, 20.0)
    assert (sched.default_priority, sched.max_user_priority) == (-5, 10)
    assert (sched.fair_share, sched.fair_share_half_life_s) == (False, 3600.0)
    assert (sched.preemption, sched.preemption_grace_s,
            sched.preempt_without_checkpoint) == (True, 120.0, True)
    assert sched.default_max_runtime_s == 86400.0
    assert (sched.gang_size_credit_s, sched.reserve_small_after_s,
            sched.unreserved_above_share) == (60.0, 1800.0, 1.5)
    assert [s.users.weight_for(u) for u in ("alice", "bob", "carol", None)] == [
        2.0, 0.5, 1.0, 1.0]


def test_scheduling_policy_defaults() -> None:
    sched = Settings().scheduler
    assert (sched.retry_mode, sched.fair_share, sched.preemption) == (
        "when_fits", True, False)
    assert (sched.default_priority, sched.max_user_priority) == (0, 0)


def test_storage_quotas_and_stream_and_address_limits_come_from_the_config() -> None:
    settings = settings_from_mapping({"v2": {
        "users": {"limits": {"max_waiting_tasks": 50, "max_spec_bytes_per_day": 1 << 20},
                  "per_user": {"ci-bot": {"max_waiting_tasks": 0}}},
        "ui": {"max_streams_per_session": 2, "max_streams_per_user": 6},
        "api": {"max_connections_per_address": 0, "cpu_share_per_user": 0.5},
    }})
    assert settings.users.limits_for("anyone") == Limits(max_waiting_tasks=50,
                                                         max_spec_bytes_per_day=1 << 20)
    assert settings.users.limits_for("ci-bot").max_waiting_tasks == 0  # no limit
    assert settings.users.limits_for("ci-bot").max_spec_bytes_per_day == 1 << 20
    assert (settings.ui_max_streams_per_session, settings.ui_max_streams_per_user) == (2, 6)
    assert settings.api_max_connections_per_address == 0
    assert settings.api_cpu_share_per_user == 0.5
    defaults = settings_from_mapping({})
    assert (defaults.ui_max_streams_per_session, defaults.ui_max_streams_per_user,
            defaults.api_max_connections_per_address, defaults.api_cpu_share_per_user
            ) == (4, 16, 128, 0.25)
    for bad, needle in (({"ui": {"max_streams_per_user": -1}}, "v2.ui.max_streams_per_user"),
                        ({"ui": {"streams": 1}}, "v2.ui: unknown keys ['streams']"),
                        ({"api": {"cpu_share_per_user": 1.5}},
                         "v2.api.cpu_share_per_user: must be <= 1 (one core)"),
                        ({"api": {"cpu_share_per_user": 0}},
                         "v2.api.cpu_share_per_user: must be >= 0.01"),
                        ({"users": {"limits": {"max_waiting_tasks": 1.5}}},
                         "v2.users.limits.max_waiting_tasks: must be an integer")):
        with pytest.raises(ConfigError, match=re.escape(needle)):
            settings_from_mapping({"v2": bad})
