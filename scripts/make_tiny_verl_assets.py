"""Tiny offline assets for a real verl PPO run: a random 2-layer Qwen2 model with its own
byte-level BPE tokenizer (chat template included) and GSM8K-shaped RL parquet files.

    python scripts/make_tiny_verl_assets.py OUT_DIR

writes ``OUT_DIR/models/tiny/`` (config, safetensors weights, tokenizer) and
``OUT_DIR/datasets/{train,test}.parquet`` (48 and 16 rows in the columns verl's
``RLHFDataset`` and its GSM8K reward read: ``data_source``, ``prompt`` (chat messages),
``ability``, ``reward_model.ground_truth``, ``extra_info``). Nothing is downloaded. Runs
with the trainer's Python: it needs torch, transformers, tokenizers, pandas and pyarrow,
which a verl install brings. The tokenizer and model are ``make_tiny_sft_assets.py``'s
(same settings; its SFT chats come from that script); the questions, the instruction and
the tokenizer's corpus are those of the team's earlier asset tool
(``tools/make_tiny_verl_assets.py`` in the team's shared folder, rewritten here so that a
clone needs nothing beside it), so prompts tokenize to the same lengths.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, when imported

from make_tiny_sft_assets import make_model, make_tokenizer

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
N_TRAIN, N_TEST = 48, 16


def problems(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """``n`` (question, worked answer, solution) triples: a sum of two numbers in 1..50."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        question = f"Tom has {a} apples and buys {b} more. How many apples does Tom have now?"
        answer = f"Tom has {a} + {b} = {a + b} apples.\n#### {a + b}"
        out.append((question, answer, str(a + b)))
    return out


def rl_rows(split: str, items: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """verl's GSM8K preprocessing shape: the prompt as chat messages, the solution as the
    rule reward's ground truth."""
    return [{
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": solution},
        "extra_info": {"split": split, "index": index, "answer": answer,
                       "question": question},
    } for index, (question, answer, solution) in enumerate(items)]


def corpus(items: list[tuple[str, str, str]]) -> list[str]:
    """What the tokenizer learns from: every prompt with its answer, and the chat roles."""
    return [f"{q} {INSTRUCTION} {a}" for q, a, _ in items] + [
        "system user assistant You are a helpful assistant."]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    out = Path(argv[1])
    model_dir, data_dir = out / "models" / "tiny", out / "datasets"
    model_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)

    import pandas as pd

    items = problems(N_TRAIN + N_TEST)
    tokenizer = make_tokenizer(corpus(items))
    tokenizer.save_pretrained(model_dir)
    model = make_model(tokenizer)
    model.save_pretrained(model_dir)
    pd.DataFrame(rl_rows("train", items[:N_TRAIN])).to_parquet(data_dir / "train.parquet")
    pd.DataFrame(rl_rows("test", items[N_TRAIN:])).to_parquet(data_dir / "test.parquet")
    params = sum(p.numel() for p in model.parameters())
    print(f"tiny assets in {out}: model {params} parameters, vocab {len(tokenizer)}, "
          f"{N_TRAIN} train / {N_TEST} test prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
