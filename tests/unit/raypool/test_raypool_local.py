"""The local launcher without starting Ray: its state file, node settings, cluster name,
the deadline of ``move-head`` (fake clock) and the ``argus-node local`` command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import psutil
import pytest

from raypool import cli
from raypool.deadline import Deadline
from raypool.discovery import write_record
from raypool.headrecord import HeadRecord
from raypool.local import launcher as local
from raypool.local import state as local_state
from raypool.local.launcher import STOP_TIMEOUT_S, healthy_record, move_head, stop_node
from raypool.local.ports import PORT_BLOCK
from raypool.local.state import LocalCluster, LocalError, LocalNode


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_cluster(tmp_path, monkeypatch, name: str = "argus-ray") -> LocalCluster:
    """A ports-mode cluster of a head and one worker, planned but not started."""
    bases = iter(range(21000, 30000, PORT_BLOCK))
    monkeypatch.setattr(local, "free_port_block", lambda size, taken: next(bases))
    cluster = LocalCluster(
        state_dir=str(tmp_path), isolation="ports", cluster_id="ab12",
        ray_temp_root=str(tmp_path / "ray"), cluster_name=name,
        head_file=str(tmp_path / "shared" / "ray" / "discovery" / name / "head.json"),
        options={"ttl_s": "10", "refresh_s": "2", "poll_s": "1", "unhealthy_s": "5",
                 "gpus": "4", "cpus": "16", "host_ip": "10.0.0.5"})
    cluster.nodes = [local._make_node(cluster, "head", "head", 2, set()),
                     local._make_node(cluster, "w1", "worker", 3, set())]
    cluster.save()
    return cluster


def record_for(cluster: LocalCluster, ip: str, port: int) -> HeadRecord:
    return HeadRecord(cluster.cluster_name, ip, port, port + 1, f"http://{ip}:{port + 1}",
                      "gen", 1, time.time(), 60.0, "h", 1)


# --- state and settings ------------------------------------------------------------------

def test_state_round_trip_without_settings_in_the_file(tmp_path, monkeypatch):
    cluster = make_cluster(tmp_path, monkeypatch)
    data = json.loads((tmp_path / "local.json").read_text())
    assert set(data["nodes"][0]) == {"name", "role", "ip", "env", "netns", "veth",
                                     "port_base", "pid", "supervisord_pid"}
    loaded = LocalCluster.load(str(tmp_path))
    assert loaded == cluster
    assert loaded.node("head").settings == cluster.node("head").settings
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_state_file_from_before_the_cluster_name_loads_with_the_default(tmp_path,
                                                                          monkeypatch):
    make_cluster(tmp_path, monkeypatch)
    data = json.loads((tmp_path / "local.json").read_text())
    del data["cluster_name"]
    (tmp_path / "local.json").write_text(json.dumps(data))
    assert LocalCluster.load(str(tmp_path)).cluster_name == "argus-ray"


def test_a_node_parses_its_settings_once(tmp_path, monkeypatch):
    make_cluster(tmp_path, monkeypatch)
    calls = []
    real = local_state.load_node_settings
    monkeypatch.setattr(local_state, "load_node_settings",
                        lambda env: calls.append(1) or real(env))
    loaded = LocalCluster.load(str(tmp_path))
    assert len(calls) == 2  # one per node, at load
    for _ in range(5):
        local.node_pids(loaded, "w1", "raylet")
        local.leftovers(loaded)
        assert loaded.node("head").settings.ray_port == loaded.nodes[0].port_base
    assert len(calls) == 2


def test_a_node_with_bad_settings_cannot_exist(tmp_path):
    with pytest.raises(LocalError, match=r"node w1: invalid node settings:\n  ARGUS_ROLE"):
        LocalNode("w1", "wrker", "10.0.0.3", {"ARGUS_ROLE": "wrker"})


def test_unknown_node_and_missing_state_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(LocalError, match="no local cluster state at"):
        LocalCluster.load(str(tmp_path))
    cluster = make_cluster(tmp_path, monkeypatch)
    with pytest.raises(LocalError, match="no node 'w9'; nodes: head, w1"):
        cluster.node("w9")


# --- cluster name ------------------------------------------------------------------------

def test_every_node_gets_the_cluster_name_and_its_head_file(tmp_path, monkeypatch):
    cluster = make_cluster(tmp_path, monkeypatch, name="blue")
    for node in cluster.nodes:
        assert node.settings.cluster_name == "blue"
        assert node.settings.head_ip_file == cluster.head_file
    assert "/discovery/blue/head.json" in cluster.head_file


def test_records_are_read_for_the_cluster_name(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "list_nodes", lambda address, timeout_s: [])
    blue = make_cluster(tmp_path, monkeypatch, name="blue")
    write_record(blue.head_file, record_for(blue, "10.0.0.5", 21000))
    assert healthy_record(blue) is not None
    other = LocalCluster(**{**blue.__dict__, "cluster_name": "green"})
    assert healthy_record(other) is None  # a record for another cluster is no head


def test_up_refuses_a_bad_cluster_name_before_creating_anything(tmp_path):
    state = tmp_path / "state"
    with pytest.raises(LocalError, match="cluster name 'no/slash': expected 1-63"):
        local.up(str(state), 1, "ports", cluster_name="no/slash")
    assert not state.exists()


# --- one deadline for move-head ----------------------------------------------------------

class SlowMoves:
    """Fakes for the effects of a move: each takes (fake) time, as on a loaded host."""

    def __init__(self, cluster: LocalCluster, clock: FakeClock, moves_after: int | None,
                 monkeypatch) -> None:
        self.cluster, self.clock, self.moves_after = cluster, clock, moves_after
        self.stop_budget = self.start_budget = -1.0
        self.checks = 0
        monkeypatch.setattr(local, "stop_node", self.stop_node)
        monkeypatch.setattr(local, "start_node", self.start_node)
        monkeypatch.setattr(local, "healthy_record", self.healthy_record)

    def stop_node(self, node: LocalNode, deadline: Deadline) -> None:
        self.stop_budget = deadline.left()
        self.clock.advance(min(30.0, deadline.left()))

    def start_node(self, cluster, node, deadline: Deadline, sleep) -> None:
        self.start_budget = deadline.left()
        self.clock.advance(min(3.0, deadline.left()))
        node.pid = node.supervisord_pid = 4242

    def healthy_record(self, cluster: LocalCluster, timeout_s: float) -> HeadRecord:
        self.checks += 1
        self.clock.advance(timeout_s)  # every health check takes its whole timeout
        head = LocalCluster.load(cluster.state_dir).node("head")
        if self.moves_after is not None and self.checks > self.moves_after:
            return record_for(cluster, head.ip, head.settings.ray_port)
        return record_for(cluster, head.ip, 21000)  # the old address


def test_move_head_gives_up_at_its_one_deadline(tmp_path, monkeypatch):
    cluster = make_cluster(tmp_path, monkeypatch)
    clock = FakeClock()
    fakes = SlowMoves(cluster, clock, moves_after=None, monkeypatch=monkeypatch)
    start = clock.now
    with pytest.raises(LocalError, match="new address within 60s"):
        move_head(str(tmp_path), timeout_s=60, clock=clock, sleep=clock.advance)
    assert clock.now - start == pytest.approx(60.0)
    assert fakes.stop_budget == STOP_TIMEOUT_S
    assert fakes.start_budget <= 60 - 30
    assert fakes.checks > 1


def test_move_head_stop_and_start_draw_on_the_same_deadline(tmp_path, monkeypatch):
    cluster = make_cluster(tmp_path, monkeypatch)
    clock = FakeClock()
    fakes = SlowMoves(cluster, clock, moves_after=None, monkeypatch=monkeypatch)
    with pytest.raises(LocalError):
        move_head(str(tmp_path), timeout_s=20, clock=clock, sleep=clock.advance)
    assert fakes.stop_budget == 20  # capped by the operation, not STOP_TIMEOUT_S
    assert fakes.start_budget == 0
    assert clock.now - 1000.0 == pytest.approx(20.0)


def test_move_head_returns_the_new_address_and_records_it(tmp_path, monkeypatch):
    cluster = make_cluster(tmp_path, monkeypatch)
    clock = FakeClock()
    SlowMoves(cluster, clock, moves_after=2, monkeypatch=monkeypatch)
    old_port = cluster.node("head").settings.ray_port
    address = move_head(str(tmp_path), timeout_s=60, clock=clock, sleep=clock.advance)
    moved = LocalCluster.load(str(tmp_path))
    new_port = moved.node("head").settings.ray_port
    assert new_port != old_port and address == f"10.0.0.5:{new_port}"
    assert moved.gcs_address == address and moved.job_server_url.endswith(f":{new_port + 1}")
    assert [n.name for n in moved.nodes] == ["head", "w1"]
    assert moved.node("head").supervisord_pid == 4242


def test_stop_node_returns_by_its_deadline_and_kills_what_ignores_sigterm(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
           "print('ready', flush=True); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        node = LocalNode("w1", "worker", "10.0.0.3",
                         {"ARGUS_ROLE": "worker", "ARGUS_RUN_DIR": str(tmp_path / "w1")},
                         supervisord_pid=proc.pid)
        started = time.monotonic()
        stop_node(node, Deadline.after(local.KILL_REAP_S + 0.3))
        took = time.monotonic() - started
        assert 0.3 <= took < local.KILL_REAP_S + 0.3  # SIGTERM ignored for 0.3 s, then KILL
        assert not psutil.pid_exists(proc.pid)  # killed and reaped by stop_node
    finally:
        proc.kill()
        proc.wait()


def test_stop_node_takes_another_process_s_zombie_for_exited(tmp_path):
    """The launcher's child of a node started by another process (``up``) is a zombie
    once it exited: ``local move-head`` must not wait for it until its deadline."""
    code = "import os, time; pid = os.fork()\nif pid == 0: os._exit(0)\n" \
           "print(pid, flush=True); time.sleep(120)"
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        zombie = int(parent.stdout.readline())
        node = LocalNode("w1", "worker", "10.0.0.3",
                         {"ARGUS_ROLE": "worker", "ARGUS_RUN_DIR": str(tmp_path / "w1")},
                         pid=zombie)
        started = time.monotonic()
        stop_node(node, Deadline.after(20))
        assert time.monotonic() - started < 2.0
        assert psutil.Process(zombie).status() == psutil.STATUS_ZOMBIE  # its parent's to reap
    finally:
        parent.kill()
        parent.wait()


# --- the command line --------------------------------------------------------------------

def test_local_commands_and_options_are_unchanged():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["local"]
    commands = next(a for a in sub._actions if a.dest == "local_command").choices
    assert sorted(commands) == ["down", "exec", "move-head", "pids", "status", "up",
                                "wipe-gcs-store"]
    up_options = {o for a in commands["up"]._actions for o in a.option_strings}
    assert up_options >= {"--state-dir", "--workers", "--isolation", "--gpus", "--cpus",
                          "--ttl", "--timeout"}
    args = parser.parse_args(["local", "up"])
    assert (args.workers, args.isolation, args.cluster_name, args.timeout) == (
        2, "ports", "argus-ray", 120.0)


def test_wipe_gcs_store_wants_yes_and_touches_nothing_without_it(tmp_path, monkeypatch,
                                                                 capsys):
    make_cluster(tmp_path, monkeypatch)
    monkeypatch.setattr(local, "stop_node", lambda *a: pytest.fail("stopped a node"))
    assert cli.main(["local", "wipe-gcs-store", "--state-dir", str(tmp_path)]) == 2
    assert "run again with --yes" in capsys.readouterr().err


def test_wipe_head_store_stops_wipes_starts_and_waits_for_a_new_cluster(tmp_path,
                                                                       monkeypatch):
    cluster = make_cluster(tmp_path, monkeypatch)
    head = cluster.node("head")
    old = replace(record_for(cluster, head.ip, head.settings.ray_port), cluster_id="old")
    write_record(cluster.head_file, old)
    done: list[str] = []
    monkeypatch.setattr(local, "stop_node", lambda node, deadline: done.append("stop"))
    monkeypatch.setattr(local, "wipe", lambda settings: done.append(
        f"wipe {settings.gcs_store_dir}"))
    monkeypatch.setattr(local, "start_node", lambda c, node, deadline: done.append("start"))
    # the old cluster's record answers until the head is back on its empty store
    answers = iter([old, old, replace(old, cluster_id="new")])
    monkeypatch.setattr(local, "healthy_record", lambda c, timeout_s: next(answers))
    assert local.wipe_head_store(str(tmp_path), timeout_s=30) == "new"
    assert done == ["stop", f"wipe {head.settings.gcs_store_dir}", "start"]


def test_a_local_error_is_printed_with_exit_2(tmp_path, capsys):
    assert cli.main(["local", "status", "--state-dir", str(tmp_path)]) == 2
    assert "argus-node local: no local cluster state at" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "local.json")


# --- a PID namespace per node --------------------------------------------------------------

def test_pid_namespace_mode(monkeypatch):
    monkeypatch.setattr(local.shutil, "which", lambda name: "/usr/bin/" + name)
    probes: list[list[str]] = []

    def probe(argv: list[str]) -> bool:
        probes.append(argv)
        return answer

    answer = True
    assert local.pid_namespace_mode(True, probe) == "root" and probes == []
    assert local.pid_namespace_mode(False, probe) == "user"
    assert probes[0][:3] == ["unshare", "--user", "--map-root-user"]
    answer = False
    assert local.pid_namespace_mode(False, probe) == ""
    monkeypatch.setattr(local.shutil, "which", lambda name: None)
    assert local.pid_namespace_mode(True, probe) == ""


@pytest.mark.parametrize("mode,prefix", [
    ("root", ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]),
    ("user", ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc",
              "--kill-child"]),
    ("", []),
])
def test_ports_nodes_run_in_their_own_pid_namespace(tmp_path, monkeypatch, mode, prefix):
    cluster = make_cluster(tmp_path, monkeypatch)
    cluster.options["pid_ns"] = mode
    argv = local.launch_argv(cluster, cluster.node("w1"), ["python", "run"])
    assert argv == [*prefix, "python", "run"]


def test_netns_nodes_get_both_namespaces(tmp_path, monkeypatch):
    cluster = make_cluster(tmp_path, monkeypatch)
    node = cluster.node("w1")
    node.netns = "ar-w1"
    assert local.launch_argv(cluster, node, ["python"]) == [
        "ip", "netns", "exec", "ar-w1", "unshare", "--pid", "--fork", "--mount-proc",
        "--kill-child", "python"]
