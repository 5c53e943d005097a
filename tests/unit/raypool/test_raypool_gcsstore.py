"""The head's GCS store: the Ray variables that select it, the lock that keeps a second
head out, and the wipe that starts a new cluster."""

from __future__ import annotations

import os

import pytest

from raypool import cli
from raypool.config import load_node_settings
from raypool.gcsstore import StoreLock, StoreLocked, ray_store_env, wipe
from raypool.watchdog import ray_env


def settings(tmp_path, role="head", **extra):
    env = {"ARGUS_ROLE": role, "ARGUS_NODE_IP": "10.0.0.2", "ARGUS_NODE_NAME": "n",
           "ARGUS_SHARED_ROOT": str(tmp_path), "ARGUS_RUN_DIR": str(tmp_path / "run")}
    env.update(extra)
    return load_node_settings(env)


def test_head_runs_ray_on_the_embedded_store(tmp_path):
    s = settings(tmp_path)
    env = ray_env(s, {"RAY_ADDRESS": "elsewhere:6379"})
    assert env["RAY_gcs_storage"] == "rocksdb"
    assert env["RAY_gcs_storage_path"] == str(tmp_path / "ray" / "gcs" / "argus-ray")
    assert env["RAY_gcs_rpc_server_reconnect_timeout_s"] == "300"
    assert "RAY_ADDRESS" not in env


def test_memory_store_and_workers_set_no_store(tmp_path):
    assert ray_store_env(settings(tmp_path, ARGUS_GCS_STORE="memory")) == {}
    worker = ray_env(settings(tmp_path, role="worker", ARGUS_GCS_RECONNECT_TIMEOUT_S="600"), {})
    assert "RAY_gcs_storage" not in worker
    assert worker["RAY_gcs_rpc_server_reconnect_timeout_s"] == "600"


def test_a_second_head_cannot_take_the_lock_and_is_told_who_holds_it(tmp_path):
    path = str(tmp_path / "gcs" / "c.lock")
    first, second = StoreLock(path), StoreLock(path)
    first.acquire()
    first.acquire()  # again: a no-op, still held
    with pytest.raises(StoreLocked, match=rf"held by host=\S+ pid={os.getpid()}"):
        second.acquire()
    assert first.held and not second.held
    first.release()
    second.acquire()
    assert second.held
    second.release()


def test_wipe_is_refused_while_a_head_holds_the_store(tmp_path):
    s = settings(tmp_path)
    os.makedirs(os.path.join(s.gcs_store_dir, "db"))
    head = StoreLock(s.gcs_store_lock)
    head.acquire()
    with pytest.raises(StoreLocked):
        wipe(s)
    assert os.path.isdir(s.gcs_store_dir)
    head.release()
    assert "removed GCS store" in wipe(s)
    assert not os.path.exists(s.gcs_store_dir)
    assert "no GCS store" in wipe(s)


def test_cli_wipe_asks_for_yes_and_refuses_a_held_store(tmp_path, monkeypatch, capsys):
    s = settings(tmp_path)
    os.makedirs(s.gcs_store_dir)
    for key, value in {"ARGUS_ROLE": "head", "ARGUS_NODE_IP": "10.0.0.2",
                       "ARGUS_SHARED_ROOT": str(tmp_path),
                       "ARGUS_RUN_DIR": str(tmp_path / "run")}.items():
        monkeypatch.setenv(key, value)
    assert cli.main(["wipe-gcs-store"]) == 2
    assert "--yes" in capsys.readouterr().err and os.path.isdir(s.gcs_store_dir)
    head = StoreLock(s.gcs_store_lock)
    head.acquire()
    assert cli.main(["wipe-gcs-store", "--yes"]) == 1
    assert "is held by" in capsys.readouterr().err and os.path.isdir(s.gcs_store_dir)
    head.release()
    assert cli.main(["wipe-gcs-store", "--yes"]) == 0
    assert not os.path.exists(s.gcs_store_dir)
