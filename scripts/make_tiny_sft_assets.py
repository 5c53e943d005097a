"""Tiny offline assets for a real verl SFT run: a random 2-layer Qwen2 model with its own
byte-level BPE tokenizer (chat template included) and chat-format parquet files.

    python scripts/make_tiny_sft_assets.py OUT_DIR

writes ``OUT_DIR/models/tiny/`` (config, safetensors weights, tokenizer) and
``OUT_DIR/datasets/{sft_train,sft_test}.parquet`` (48 and 16 rows, a ``messages`` column
of user/assistant turns: what verl's ``MultiTurnSFTDataset`` reads by default). Nothing
is downloaded. Runs with the trainer's Python: it needs torch, transformers, tokenizers,
pandas and pyarrow, which a verl install brings. The model has about 100k parameters,
so a training step costs next to nothing on any GPU: the run measures the platform
(queue, admission, Ray, verl's trainer), not the model.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
N_TRAIN, N_TEST = 48, 16


def conversations(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """``n`` two-turn chats: an addition question and its worked answer."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        question = f"A box holds {a} pens and {b} more are added. How many pens are in the box?"
        answer = f"{a} + {b} = {a + b}. The box holds {a + b} pens.\n#### {a + b}"
        chats.append([{"role": "user", "content": question},
                      {"role": "assistant", "content": answer}])
    return chats


def make_tokenizer(corpus: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def make_model(tokenizer):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=2048, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = Path(argv[1])
    model_dir, data_dir = out / "models" / "tiny", out / "datasets"
    model_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)

    import pandas as pd

    chats = conversations(N_TRAIN + N_TEST)
    corpus = [turn["content"] for chat in chats for turn in chat]
    corpus += ["user assistant system", *SPECIAL_TOKENS]
    tokenizer = make_tokenizer(corpus)
    tokenizer.save_pretrained(model_dir)
    model = make_model(tokenizer)
    model.save_pretrained(model_dir)
    pd.DataFrame({"messages": chats[:N_TRAIN]}).to_parquet(data_dir / "sft_train.parquet")
    pd.DataFrame({"messages": chats[N_TRAIN:]}).to_parquet(data_dir / "sft_test.parquet")
    params = sum(p.numel() for p in model.parameters())
    print(f"tiny assets in {out}: model {params} parameters, vocab {len(tokenizer)}, "
          f"{N_TRAIN} train / {N_TEST} test conversations")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
