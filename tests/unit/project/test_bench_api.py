"""The API bench's side-by-side mode (bench/bench_api.py --compare): its arguments, the
order the two servers take turns in, how rounds add up and the ratio it prints. Nothing is
benchmarked here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo: bench.*

from bench import bench_api


def test_without_compare_it_runs_every_row_on_this_checkout() -> None:
    args = bench_api.parse_args([])
    assert args.role is None and args.compare is None
    assert args.rows == list(bench_api.ROWS)
    assert (args.duration, args.clients, args.tasks, args.rounds) == (8.0, 50, 100_000, 2)


def test_compare_takes_a_revision_rounds_and_a_subset_of_rows() -> None:
    args = bench_api.parse_args(["--compare", "0aba0f5", "--rounds", "4",
                                 "--rows", "POST saturated,GET saturated", "--duration", "3"])
    assert args.compare == "0aba0f5" and args.rounds == 4 and args.duration == 3.0
    assert args.rows == ["GET saturated", "POST saturated"]  # in the table's order


@pytest.mark.parametrize("argv", [
    ["--compare", "main", "--rounds", "0"],
    ["--rounds", "3"],  # rounds without a second server
    ["--rows", "GET fast"],
    ["--rows", ","],
])
def test_bad_arguments_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]
                                   ) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_api.parse_args(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_the_server_roles_take_another_checkout() -> None:
    args = bench_api.parse_args(["serve", "--config", "c.yaml", "--port", "8080",
                                 "--code", "/tmp/old"])
    assert (args.role, args.code, args.port) == ("serve", "/tmp/old", 8080)
    args = bench_api.parse_args(["prefill", "--db", "d", "--tasks", "10", "--runnable", "2"])
    assert (args.role, args.code, args.tasks) == ("prefill", None, 10)


def test_the_two_servers_alternate_so_a_drift_weighs_on_both() -> None:
    assert bench_api.alternation(1) == [(0, 1)]
    assert bench_api.alternation(4) == [(0, 1), (1, 0), (0, 1), (1, 0)]
    order = [k for pair in bench_api.alternation(4) for k in pair]
    assert sum(i for i, k in enumerate(order) if k == 0) == sum(
        i for i, k in enumerate(order) if k == 1)  # the same mean position
    with pytest.raises(ValueError):
        bench_api.alternation(0)


def test_rounds_merge_into_one_row() -> None:
    rounds = [
        {"requests": 1000, "errors": 0, "p50_ms": 10.0, "p99_ms": 40.0, "cpu_s": 0.8,
         "loop_s": 0.4},
        {"requests": 3000, "errors": 2, "p50_ms": 20.0, "p99_ms": 60.0, "cpu_s": 1.6,
         "loop_s": 0.8},
    ]
    row = bench_api.merge(rounds, duration=2.0)
    assert row["requests"] == 4000 and row["errors"] == 2
    assert row["rps"] == pytest.approx(1000.0)  # 4000 requests over 2 x 2 s
    assert row["cpu_us"] == pytest.approx(600.0)  # 2.4 s of CPU over 4000 requests
    assert row["loop_us"] == pytest.approx(300.0)
    assert (row["p50_ms"], row["p99_ms"]) == (15.0, 50.0)  # the rounds' median


def test_the_ratio_is_this_over_the_revision() -> None:
    assert bench_api.ratio(931.0, 726.0) == "1.28x"
    assert bench_api.ratio(1.0, 0.0) == "-"


def test_the_engine_option_defaults_to_sqlite_and_refuses_compare_beside_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_api.parse_args([]).engine == "sqlite"
    args = bench_api.parse_args(["--engine", "both", "--rounds", "4", "--pg-socket"])
    assert (args.engine, args.rounds, args.pg_socket) == ("both", 4, True)
    with pytest.raises(SystemExit):
        bench_api.parse_args(["--engine", "postgresql", "--compare", "main"])
    assert "--compare runs on SQLite" in capsys.readouterr().err


def test_the_engine_verdict_is_postgresqls_share_of_sqlites_saturated_throughput() -> None:
    merged = {"POST saturated": [{"rps": 1000.0}, {"rps": 450.0}],
              "GET saturated": [{"rps": 2000.0}, {"rps": 1500.0}]}
    line, ok = bench_api.engine_verdict(merged)
    assert line == ("engine: POST 0.45x (floor 0.5) MISSED, GET 0.75x (floor 0.7) ok")
    assert ok is False
    merged["POST saturated"][1]["rps"] = 500.0
    assert bench_api.engine_verdict(merged) == (
        "engine: POST 0.50x (floor 0.5) ok, GET 0.75x (floor 0.7) ok", True)
    assert bench_api.engine_verdict({}) == ("engine: no saturated row run", True)
