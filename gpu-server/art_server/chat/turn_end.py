"""The tokens that end a sampled turn: the tokenizer's end-of-sequence token and those of the model's
generation config (ChatML's `<|im_end|>`, Gemma's `<end_of_turn>`). Sampling stops on them (the hf
engine's scheduler; vLLM reads the same config), and SFT trains a turn up to and including the last
of them, not the template's glue after it (ChatML's newline after `<|im_end|>` is never sampled)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def end_of_turn_ids(tokenizer: Any, generation_eos: int | list[int] | None) -> set[int]:
    ids: set[int] = set()
    for source in (generation_eos, getattr(tokenizer, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    return ids


def generation_eos(model_dir: Path) -> int | list[int] | None:
    """The eos_token_id of the model's generation_config.json (None without one)."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(str(model_dir), local_files_only=True).eos_token_id
    except OSError:  # no generation_config.json
        return None


def trained_span(turn: list[int], ends: set[int]) -> int:
    """How many of a rendered assistant turn's tokens were sampled: up to and including its last
    end-of-turn token (all of them when it has none: a template without one)."""
    for k in range(len(turn) - 1, -1, -1):
        if turn[k] in ends:
            return k + 1
    return len(turn)
