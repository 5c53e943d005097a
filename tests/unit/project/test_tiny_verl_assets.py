"""``scripts/make_tiny_verl_assets.py`` (the tiny PPO assets of ``tests/verl``), without
torch: its prompts are deterministic GSM8K-shaped rows with the worked sum as their
ground truth, and it takes the output folder as its one argument."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "make_tiny_verl_assets.py"


def _load():
    spec = importlib.util.spec_from_file_location("make_tiny_verl_assets", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no torch/transformers at module level
    return module


def test_problems_are_deterministic_sums() -> None:
    assets = _load()
    items = assets.problems(assets.N_TRAIN + assets.N_TEST)
    assert items == assets.problems(assets.N_TRAIN + assets.N_TEST)
    assert len(items) == 64
    # the first and last of the team's earlier tool (random.seed(0)): same prompts, same
    # tokenized lengths under max_prompt_length=64
    assert items[0] == ("Tom has 25 apples and buys 49 more. How many apples does Tom have "
                        "now?", "Tom has 25 + 49 = 74 apples.\n#### 74", "74")
    assert items[-1][2] == "56"
    for question, answer, solution in items:
        a, b = (int(w) for w in question.split() if w.isdigit())
        assert 1 <= a <= 50 and 1 <= b <= 50 and solution == str(a + b)
        assert answer.endswith(f"#### {a + b}")


def test_rl_rows_have_verl_gsm8k_columns() -> None:
    assets = _load()
    rows = assets.rl_rows("test", assets.problems(2))
    assert [r["extra_info"]["index"] for r in rows] == [0, 1]
    row = rows[0]
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert row["data_source"] == "openai/gsm8k"  # picks verl's GSM8K rule reward
    assert row["prompt"] == [{"role": "user",
                              "content": f"{row['extra_info']['question']} "
                                         f"{assets.INSTRUCTION}"}]
    assert row["reward_model"] == {"style": "rule",
                                   "ground_truth": assets.problems(1)[0][2]}
    assert row["extra_info"]["split"] == "test"


def test_corpus_covers_prompts_answers_and_roles() -> None:
    assets = _load()
    items = assets.problems(3)
    corpus = assets.corpus(items)
    assert len(corpus) == 4 and "assistant" in corpus[-1]
    assert all(q in text and a in text for (q, a, _), text in zip(items, corpus, strict=False))


def test_usage_without_an_output_folder(capsys) -> None:
    assert _load().main(["make_tiny_verl_assets.py"]) == 2
    assert capsys.readouterr().err.strip() == "python scripts/make_tiny_verl_assets.py OUT_DIR"
