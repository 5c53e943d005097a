"""NodeSettings from ARGUS_* env: defaults, every bad variable named, IP detection."""

from __future__ import annotations

import pytest

from raypool.config import SettingsError, detect_node_ip, load_node_settings, parse_resources_kv


def load(**env: str):
    base = {"ARGUS_ROLE": "worker", "ARGUS_NODE_IP": "10.0.0.5", "ARGUS_NODE_NAME": "n1"}
    base.update(env)
    return load_node_settings(base)


def test_defaults_follow_spec_b1():
    s = load()
    assert s.shared_root == "/private"
    assert s.cluster_name == "argus-ray"
    assert s.head_ip_file == "/private/ray/discovery/argus-ray/head.json"
    assert (s.ray_port, s.dashboard_port) == (6379, 8265)
    assert (s.ttl_s, s.refresh_s, s.poll_s) == (60, 10, 5)
    assert dict(s.worker_resources) == {"worker_node": 100.0}
    assert s.log_dir == "/private/common/logs"
    assert s.gcs_reconnect_timeout_s == 300
    assert (s.gcs_store, s.head_host) == ("rocksdb", "")
    assert s.gcs_store_dir == "/private/ray/gcs/argus-ray"
    assert s.gcs_store_lock == "/private/ray/gcs/argus-ray.lock"
    assert s.worker_num_gpus is None and s.worker_num_cpus is None
    assert s.ray_extra_args == ()


def test_derived_paths_follow_shared_root_and_cluster():
    s = load(ARGUS_SHARED_ROOT="/mnt/shared", ARGUS_CLUSTER_NAME="c2")
    assert s.head_ip_file == "/mnt/shared/ray/discovery/c2/head.json"
    assert s.log_dir == "/mnt/shared/common/logs"
    assert s.node_log_dir == "/mnt/shared/common/logs/n1"
    assert s.gcs_store_dir == "/mnt/shared/ray/gcs/c2"


def test_settings_are_frozen():
    s = load()
    with pytest.raises(AttributeError):
        s.ray_port = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.worker_resources["x"] = 1  # type: ignore[index]


@pytest.mark.parametrize("var,value", [
    ("ARGUS_ROLE", ""),
    ("ARGUS_ROLE", "master"),
    ("ARGUS_SHARED_ROOT", "relative/path"),
    ("ARGUS_CLUSTER_NAME", "bad name!"),
    ("ARGUS_HEAD_IP_FILE", "head.json"),
    ("ARGUS_RAY_PORT", "0"),
    ("ARGUS_RAY_PORT", "70000"),
    ("ARGUS_RAY_PORT", "abc"),
    ("ARGUS_DASHBOARD_PORT", "-1"),
    ("ARGUS_DASHBOARD_PORT", "6379"),
    ("ARGUS_TTL_S", "0"),
    ("ARGUS_TTL_S", "nan"),
    ("ARGUS_REFRESH_S", "60"),
    ("ARGUS_POLL_S", "-2"),
    ("ARGUS_NODE_IP", "10.0.0.300"),
    ("ARGUS_WORKER_RESOURCES_KV", "worker_node"),
    ("ARGUS_WORKER_RESOURCES_KV", "worker_node=lots"),
    ("ARGUS_WORKER_RESOURCES_KV", "GPU=4"),
    ("ARGUS_WORKER_RESOURCES_KV", "a=1,a=2"),
    ("ARGUS_WORKER_RESOURCES_KV", "a=-1"),
    ("ARGUS_RAY_EXTRA_ARGS", "--foo 'unterminated"),
    ("ARGUS_RAY_EXTRA_ARGS", "--num-gpus=8"),
    ("ARGUS_RAY_EXTRA_ARGS", "--address 1.2.3.4:6379"),
    ("ARGUS_LOG_DIR", "logs"),
    ("ARGUS_RUN_DIR", "/run/" + "x" * 120),
    ("ARGUS_RUN_DIR", "/run/a\nb"),
    ("ARGUS_RAY_TEMP_DIR", "tmp"),
    ("ARGUS_WORKER_NUM_GPUS", "four"),
    ("ARGUS_WORKER_NUM_CPUS", "-3"),
    ("ARGUS_GCS_RECONNECT_TIMEOUT_S", "0"),
    ("ARGUS_GCS_STORE", "redis"),
    ("ARGUS_GCS_STORE_DIR", "gcs"),
    ("ARGUS_HEAD_HOST", "ray head"),
    ("ARGUS_HEAD_HOST", "-x"),
    ("ARGUS_NODE_NAME", "a/b"),
    ("ARGUS_NODE_NAME", "a.b"),
    ("ARGUS_NODE_NAME", "-w1"),
    ("ARGUS_NODE_NAME", "w1-"),
    ("ARGUS_NODE_NAME", "x" * 64),
    ("ARGUS_NODE_NAME", "w 1"),
    ("ARGUS_NODE_NAME", "w1'; rm -rf /"),
    ("ARGUS_RAY_EXTRA_ARGS", "--node-name=x"),
    ("ARGUS_RAY_EXTRA_ARGS", "--labels argus.node=x"),
    ("ARGUS_RAY_EXTRA_ARGS", "--labels=nokey"),
    ("ARGUS_START_TIMEOUT_S", "x"),
])
def test_each_bad_variable_is_named(var, value):
    with pytest.raises(SettingsError) as info:
        load(**{var: value})
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith(f"{var}=")
    assert "expected" in info.value.problems[0]


def test_all_problems_reported_at_once():
    with pytest.raises(SettingsError) as info:
        load_node_settings({"ARGUS_ROLE": "x", "ARGUS_RAY_PORT": "0", "ARGUS_NODE_IP": "nope"})
    names = [p.split("=", 1)[0] for p in info.value.problems]
    assert names == ["ARGUS_ROLE", "ARGUS_RAY_PORT", "ARGUS_NODE_IP"]


def test_resources_and_extra_args_parsed():
    s = load(ARGUS_WORKER_RESOURCES_KV=" worker_node=100, ssd=1.5 ",
             ARGUS_RAY_EXTRA_ARGS="--node-manager-port=23001 --labels 'a=b, zone=eu-1'",
             ARGUS_WORKER_NUM_GPUS="4", ARGUS_WORKER_NUM_CPUS="16")
    assert dict(s.worker_resources) == {"worker_node": 100.0, "ssd": 1.5}
    assert s.ray_extra_args == ("--node-manager-port=23001",)
    assert dict(s.ray_labels) == {"a": "b", "zone": "eu-1"}
    assert s.node_manager_port == 23001
    assert (s.worker_num_gpus, s.worker_num_cpus) == (4, 16)


def test_node_tag_differs_per_run_dir():
    a = load(ARGUS_RUN_DIR="/tmp/a")
    b = load(ARGUS_RUN_DIR="/tmp/b")
    assert a.node_tag != b.node_tag
    assert a.node_tag == load(ARGUS_RUN_DIR="/tmp/a/").node_tag


def test_parse_resources_kv_rejects_empty_item():
    with pytest.raises(ValueError, match="bad item"):
        parse_resources_kv("a=1,,b=2")


def test_detect_node_ip_skips_failed_and_loopback_strategies():
    assert detect_node_ip((lambda: None, lambda: "127.0.1.1", lambda: "10.1.2.3")) == "10.1.2.3"
    assert detect_node_ip((lambda: None,)) == "127.0.0.1"


def test_empty_node_ip_is_detected():
    s = load_node_settings({"ARGUS_ROLE": "head", "ARGUS_NODE_IP": ""},
                           detect_ip=lambda: "192.168.7.7")
    assert s.node_ip == "192.168.7.7"
    assert s.job_server_url == "http://192.168.7.7:8265"


@pytest.mark.parametrize("name", ["w1", "ray-worker-0", "gpu_node_7", "A", "x" * 63])
def test_good_node_names(name):
    assert load(ARGUS_NODE_NAME=name).node_name == name


def test_a_bad_host_name_as_default_names_the_variable(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "bad_host_.example.org")
    with pytest.raises(SettingsError) as info:
        load_node_settings({"ARGUS_ROLE": "worker", "ARGUS_NODE_IP": "10.0.0.5"})
    assert info.value.problems == [
        "ARGUS_NODE_NAME='bad_host_': expected 1-63 characters of [A-Za-z0-9_-], starting and "
        "ending alphanumeric (a DNS label) (the host name: set ARGUS_NODE_NAME)"]


def test_default_node_name_is_the_short_host_name(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "ray-worker-0.lab.example")
    s = load_node_settings({"ARGUS_ROLE": "worker", "ARGUS_NODE_IP": "10.0.0.5"})
    assert s.node_name == "ray-worker-0"


def test_ray_identity_args_merge_the_operators_labels():
    from raypool.config import ray_identity_args

    s = load(ARGUS_NODE_NAME="w1", ARGUS_RAY_EXTRA_ARGS="--labels=zone=eu-1,ray.io/x=y")
    assert ray_identity_args(s) == ["--node-name=w1",
                                    "--labels=argus.node=w1,ray.io/x=y,zone=eu-1"]
    assert ray_identity_args(load(ARGUS_NODE_NAME="w1")) == [
        "--node-name=w1", "--labels=argus.node=w1"]


def test_health_defaults_and_file_beside_head_json():
    s = load(ARGUS_NODE_NAME="w1")
    assert (s.health_interval_s, s.health_timeout_s) == (30, 20)
    assert s.health_min_free_bytes == 2**30 and s.health_cmd == ()
    assert s.health_ignore_xids == {13, 31, 43, 45, 68, 109} and s.fake_gpus == ""
    assert s.health_file == "/private/ray/discovery/argus-ray/nodes/w1.health.json"
    assert s.offered_gpus is None and load(ARGUS_WORKER_NUM_GPUS="4").offered_gpus == 4
    assert load(ARGUS_ROLE="head").offered_gpus == 0


def test_health_settings_parsed():
    s = load(ARGUS_HEALTH_INTERVAL_S="0", ARGUS_HEALTH_MIN_FREE_GB="2.5",
             ARGUS_HEALTH_CMD="/usr/bin/check --ib 'mlx5_0 mlx5_1'", ARGUS_HEALTH_TIMEOUT_S="5",
             ARGUS_HEALTH_IGNORE_XIDS="13, 43", ARGUS_FAKE_GPUS="standin")
    assert s.health_interval_s == 0 and s.health_min_free_bytes == int(2.5 * 2**30)
    assert s.health_cmd == ("/usr/bin/check", "--ib", "mlx5_0 mlx5_1")
    assert s.health_timeout_s == 5 and s.health_ignore_xids == {13, 43}
    assert s.fake_gpus == "standin"
    assert load(ARGUS_HEALTH_IGNORE_XIDS="none").health_ignore_xids == frozenset()
    assert load(ARGUS_FAKE_GPUS="0").fake_gpus == ""


@pytest.mark.parametrize("var,value", [
    ("ARGUS_HEALTH_INTERVAL_S", "-1"),
    ("ARGUS_HEALTH_INTERVAL_S", "often"),
    ("ARGUS_HEALTH_TIMEOUT_S", "0"),
    ("ARGUS_HEALTH_MIN_FREE_GB", "lots"),
    ("ARGUS_HEALTH_CMD", "check 'unterminated"),
    ("ARGUS_HEALTH_IGNORE_XIDS", "13,x"),
    ("ARGUS_FAKE_GPUS", "yes"),
])
def test_each_bad_health_variable_is_named(var, value):
    with pytest.raises(SettingsError) as info:
        load(**{var: value})
    assert [p.split("=", 1)[0] for p in info.value.problems] == [var]
