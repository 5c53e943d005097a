"""The YAML front door: hostile bodies are refused quickly, cheaply, with a line and column.

Each hostile case is one that crashed the service, froze it for seconds or answered 500
before the front door existed (deep nesting segfaulted libyaml's composer; merge-key and
alias bombs took 26 s and 775 MB; tagged scalars and huge integers raised ValueError).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from service.config import Settings
from service.jobspec import yamldoc
from service.jobspec.model import JobSpecError
from service.jobspec.spec import parse_jobspec

ROOT = Path(__file__).resolve().parents[3]
# the parser must hold hostile bodies up to a generous operator limit, past the default
SETTINGS = Settings(max_body_bytes=1 << 20)
GOOD = (
    "workload: ppo\ncode_path: /private/code\nmodel_id: Qwen/Qwen2.5-0.5B-Instruct\n"
    "train_file: /private/t.parquet\nval_file: /private/v.parquet\nnnodes: 1\n"
    "n_gpus_per_node: 1\n"
)


def _alias_bomb(levels: int, width: int) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * width)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def _merge_bomb(levels: int, width: int) -> str:
    lines = ["m0: &m0 {k0: 1, k1: 2}"]
    for i in range(1, levels):
        refs = ", ".join([f"*m{i - 1}"] * width)
        lines.append(f"m{i}: &m{i} {{<<: [{refs}], k{i}: {i}}}")
    return "\n".join(lines) + "\n"


# Too deep a body is refused by Argus's own depth check or, since PyYAML 6.0.4, by PyYAML's
# scanner first (flow levels past its own limit): either way a 400 at a line and column.
# The contract is the refusal, not which layer's wording it carries.
TOO_DEEP = re.compile(r"nested deeper than 3 levels|malformed YAML: .*nesting depth")

# name -> (body, the start of the first detail's message, or a pattern it must match)
HOSTILE: dict[str, tuple[str, str | re.Pattern[str]]] = {
    "flow sequences 60 KB deep": ("d: " + "[" * 30_000 + "]" * 30_000, TOO_DEEP),
    "flow mappings deep": ("d: " + "{a: " * 15_000 + "1" + "}" * 15_000,
                           "nested deeper than 3 levels"),
    "block sequences deep": ("- " * 20_000 + "x\n", "nested deeper than 3 levels"),
    "1 MiB of unclosed brackets": ("[" * (1 << 20), TOO_DEEP),
    "alias bomb": (_alias_bomb(9, 9), "anchors (&a0) are not accepted"),
    "merge-key bomb, 7 levels": (_merge_bomb(7, 8), "anchors (&m0) are not accepted"),
    "alias in a complex key": ("big: &big [a, b]\n? *big\n: 1\n",
                               "anchors (&big) are not accepted"),
    "complex key": ("? [a, b]\n: 1\n", "complex (non-scalar) mapping keys are not accepted"),
    "flow complex key": ("{[a]: 1}", "complex (non-scalar) mapping keys are not accepted"),
    "bare alias": ("a: *nowhere\n", "aliases (*nowhere) are not accepted"),
    "merge key": (GOOD + "<<: {nnodes: 8}\n", "merge keys (<<) are not accepted"),
    "merge key, scalar": ("<<: 1\n", "merge keys (<<) are not accepted"),
    "integer of 5000 digits": ("nnodes: " + "9" * 5000 + "\n",
                               "an integer of 5000 digits, over the limit of 32"),
    "!!int 'abc'": ("nnodes: !!int 'abc'\n", "explicit tags (tag:yaml.org,2002:int)"),
    "!!float abc": ("nnodes: !!float abc\n", "explicit tags (tag:yaml.org,2002:float)"),
    "!!timestamp 2001-13-45": ("d: !!timestamp 2001-13-45\n",
                               "explicit tags (tag:yaml.org,2002:timestamp)"),
    "implicit timestamp 2001-13-45": ("d: 2001-13-45\n",
                                      "cannot read '2001-13-45' as timestamp"),
    "!!python/object": ("!!python/object/apply:os.system ['true']\n", "explicit tags"),
    "local tag": ("d: !mine x\n", "explicit tags (!mine)"),
    "non-specific tag": ("d: ! 12\n", "explicit tags (!)"),
    "tagged mapping": ("d: !!set {a, b}\n", "explicit tags (tag:yaml.org,2002:set)"),
    "too many nodes": ("overrides: [" + "a, " * 200_000 + "a]\n", "more than 1024 YAML nodes"),
    "scalar of 1,000,000 characters": ("submission_id: " + "x" * 1_000_000 + "\n",
                                       "a scalar of 1000000 characters"),
    "documents": ("a: 1\n---\n" * 50_000, "expected a single document"),
    "NUL byte": ("workload: ppo\x00\n", "malformed YAML: unacceptable character #x0000"),
    "value tag (=)": ("d: =\n", "cannot read the value"),
}


def _refusal(body: str) -> list[dict]:
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(body, SETTINGS)
    assert info.value.status == 400
    return info.value.details


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_body_is_a_400_with_line_and_column(name: str) -> None:
    body, message = HOSTILE[name]
    assert len(body.encode()) <= SETTINGS.max_body_bytes
    details = _refusal(body)
    if isinstance(message, re.Pattern):
        assert message.match(details[0]["message"]), details[0]
    else:
        assert details[0]["message"].startswith(message), details[0]
    assert {"line", "column"} <= set(details[0]), details[0]
    assert details[0]["message"].endswith(
        f"(line {details[0]['line']}, column {details[0]['column']})")


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_body_is_refused_within_100_ms(name: str) -> None:
    body, _ = HOSTILE[name]
    best = float("inf")
    for _ in range(3):  # the best of three: a busy machine may stall any one run
        started = time.perf_counter()
        with pytest.raises(JobSpecError):
            parse_jobspec(body, SETTINGS)
        best = min(best, time.perf_counter() - started)
    assert best <= 0.100, f"{name}: {best * 1000:.1f} ms"


def test_hostile_bodies_cost_at_most_64_mb(tmp_path: Path) -> None:
    """Peak RSS of a fresh process parsing every hostile body, over its baseline."""
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([body for body, _ in HOSTILE.values()]))
    program = textwrap.dedent(f"""
        import json, resource
        from service.config import Settings
        from service.jobspec.spec import parse_jobspec
        from service.jobspec.model import JobSpecError
        bodies = json.load(open({str(corpus)!r}))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for body in bodies:
            try:
                parse_jobspec(body, Settings())
            except JobSpecError:
                pass
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"grew_kib": after - before}}))
    """)
    proc = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    grew_mib = json.loads(proc.stdout)["grew_kib"] / 1024
    assert grew_mib <= 64, f"peak RSS grew by {grew_mib:.1f} MiB"


def test_deep_nesting_does_not_crash_the_process() -> None:
    """The 60 KB body that segfaulted libyaml's composer: a clean 400 in a child process."""
    program = textwrap.dedent("""
        import json
        from service.config import Settings
        from service.jobspec.spec import parse_jobspec
        from service.jobspec.model import JobSpecError
        for body in ("d: " + "[" * 25_000 + "]" * 25_000,
                     "d: " + "{a: " * 25_000 + "1" + "}" * 25_000):
            try:
                parse_jobspec(body, Settings())
            except JobSpecError as exc:
                print(json.dumps(exc.details))
    """)
    proc = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(answers) == 2, proc.stdout
    for details in answers:
        first = details[0]
        assert TOO_DEEP.match(first["message"]), first
        assert first["line"] == 1 and first["column"] >= 5, first
        assert first["message"].endswith(f"(line 1, column {first['column']})"), first


# -- behaviour on ordinary documents --------------------------------------------------


def test_merge_keys_no_longer_override_silently() -> None:
    # before: accepted, and nnodes came from whichever the merge picked
    details = _refusal(GOOD + "<<: {nnodes: 8}\n")
    assert details == [{"field": "body", "line": 8, "column": 1,
                        "message": "merge keys (<<) are not accepted (line 8, column 1)"}]
    details = _refusal("base: {nnodes: 8}\n<<: 1\n")
    assert details == [{"field": "body", "line": 2, "column": 1,
                        "message": "merge keys (<<) are not accepted (line 2, column 1)"}]


def test_a_quoted_merge_key_is_just_a_string() -> None:
    assert yamldoc.load('"<<": 1\n') == {"<<": 1}


def test_scalar_problems_are_all_reported_with_their_field() -> None:
    text = "nnodes: !!int '3'\nsave_freq: " + "1" * 40 + "\nd: 2001-13-45\n"
    assert [(d["field"], d["line"], d["column"]) for d in _refusal(text)] == [
        ("nnodes", 1, 9), ("save_freq", 2, 12), ("d", 3, 4)]


def test_field_names_problems_inside_lists() -> None:
    details = _refusal(GOOD + "overrides:\n  - a.b=1\n  - !!str c\n")
    assert [(d["field"], d["line"]) for d in details] == [("overrides", 10)]


def test_duplicate_keys_are_reported_once_per_repeat() -> None:
    with pytest.raises(yamldoc.YamlDocError) as info:
        yamldoc.load("a: 1\nb: 2\na: 3\na: 4\n")
    assert [(d["field"], d["line"]) for d in info.value.details] == [("a", 3), ("a", 4)]


def test_plain_documents_load_as_plain_values() -> None:
    doc = yamldoc.load("a: 1\nb: [x, 2.5, true, null, '3']\nc: {d: e}\nf: 2001-12-14\n")
    assert doc["a"] == 1 and doc["b"] == ["x", 2.5, True, None, "3"]
    assert doc["c"] == {"d": "e"}
    assert str(doc["f"]) == "2001-12-14"
    assert yamldoc.load("") is None
    assert yamldoc.load("# nothing\n") is None
    assert yamldoc.load("42") == 42


def test_limits_are_parameters() -> None:
    limits = yamldoc.Limits(max_depth=4, max_nodes=10, max_scalar_chars=3, max_int_digits=2)
    assert yamldoc.load("a: [[[1]]]", limits) == {"a": [[[1]]]}
    with pytest.raises(yamldoc.YamlDocError, match="more than 10 YAML nodes"):
        yamldoc.load("[" + "1, " * 10 + "1]", limits)
    with pytest.raises(yamldoc.YamlDocError, match="a scalar of 4 characters"):
        yamldoc.load("abcd", limits)
    with pytest.raises(yamldoc.YamlDocError, match="an integer of 3 digits"):
        yamldoc.load("100", limits)


def test_the_time_budget_stops_a_slow_walk() -> None:
    ticks = iter(range(1_000_000))  # a clock that moves one second per look

    def clock() -> float:
        return float(next(ticks))

    text = "[" + ", ".join(["1"] * 200) + "]"
    with pytest.raises(yamldoc.YamlDocError, match=r"parsing took longer than 0.5 s"):
        yamldoc.load(text, yamldoc.Limits(max_nodes=1000), clock=clock)
    assert yamldoc.load(text, yamldoc.Limits(max_nodes=1000)) == [1] * 200
