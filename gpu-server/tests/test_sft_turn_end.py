"""SFT trains each assistant turn up to and including the token that ends it, as it would have been
sampled, for every chat template in the project: the template's glue after that token (ChatML's
newline after `<|im_end|>`, Gemma's after `<end_of_turn>`) is context. Before, it was trained: the
model learned to emit a token after the one that stops sampling, which no sampled turn contains."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from art_server.chat.turn_end import end_of_turn_ids, generation_eos
from art_server.models.packaged import PACKAGED_MODELS, packaged_parts
from art_server.models.resolve import resolve_base_model
from art_server.trainer.sft import sft_sequence

from conftest import MODEL_CACHE

pytestmark = pytest.mark.fast  # no server process (docs/development.md#tiers)

# (builtin:tiny-forgetful rewrites earlier turns, which SFT refuses: test_rewritten_history.py.)
MODELS = ["builtin:tiny", "HuggingFaceTB/SmolLM2-135M-Instruct", "google/gemma-3-270m"]
CONVERSATION = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "Another one?"},
    {"role": "assistant", "content": "Green, of course."},
]


def trained_runs(seq) -> list[tuple[int, int]]:
    """(start, end) of each run of trained tokens."""
    runs, start = [], None
    for k, t in enumerate([*seq.trained, False]):
        if t and start is None:
            start = k
        elif not t and start is not None:
            runs.append((start, k))
            start = None
    return runs


@pytest.mark.parametrize("name", MODELS)
def test_each_assistant_turn_trains_through_its_end_of_turn_token_and_no_further(name, data_dir):
    if name in PACKAGED_MODELS and packaged_parts(PACKAGED_MODELS[name]) is None:
        pytest.skip(f"{name}'s packages are not installed (npm test installs them)")
    path = resolve_base_model(name, data_dir, MODEL_CACHE).path
    tokenizer = AutoTokenizer.from_pretrained(path)
    ends = end_of_turn_ids(tokenizer, generation_eos(path))
    seq = sft_sequence(tokenizer, CONVERSATION, None, "all_assistant", ends)
    runs = trained_runs(seq)
    assert len(runs) == 2, (name, runs)
    for (start, end), answer in zip(runs, ("Blue.", "Green, of course.")):
        trained = seq.input_ids[start:end]
        assert trained[-1] in ends, (name, tokenizer.convert_ids_to_tokens(trained))
        assert sum(t in ends for t in trained) == 1  # one turn: its text, then the token that stops sampling
        assert tokenizer.decode(trained[:-1]).strip() == answer
    # What the template adds after the last end-of-turn token is context (ChatML and Gemma: a newline).
    tail = seq.input_ids[runs[-1][1] :]
    print(f"\n{name}: after the last trained token, untrained {tokenizer.convert_ids_to_tokens(tail)}")
    # Without the end-of-turn tokens (the old behaviour) that glue was trained too, in every turn.
    old = sft_sequence(tokenizer, CONVERSATION, None, "all_assistant")
    assert sum(old.trained) - sum(seq.trained) == 2 * len(tail) > 0
