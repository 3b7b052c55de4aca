"""How a rank's share of a gradient step is cut into micro-batches (forward/backward passes).

A pass keeps its activations until its backward, so its memory grows with the tokens it holds,
not with its rows: 16 tool-calling conversations of 700 tokens held about 7 GB on a 2-core CPU
(docs/cookbook.md, #40). A micro-batch therefore takes at most `size` rows **and** at most
`max_tokens` padded tokens (rows x its longest row); a row longer than the budget goes alone.
The gradient is the same sum however the rows are cut.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

# The default budget: a 135M model's pass over 4096 tokens holds about 2.5 GB of activations on CPU.
MICRO_BATCH_TOKENS = 4096


def micro_batches(items: Sequence[T], size: int, max_tokens: int, tokens: Callable[[T], int]) -> list[list[T]]:
    """`items`, in order, cut into consecutive micro-batches within both limits."""
    out: list[list[T]] = []
    current: list[T] = []
    longest = 0
    for item in items:
        n = tokens(item)
        if current and (len(current) >= size or max(longest, n) * (len(current) + 1) > max_tokens):
            out.append(current)
            current, longest = [], 0
        current.append(item)
        longest = max(longest, n)
    if current:
        out.append(current)
    return out


def prompt_ordered_micro_batches(
    items: Sequence[T], size: int, max_tokens: int, token_ids: Callable[[T], list[int]]
) -> list[list[T]]:
    """`items` sorted by their token ids, then cut by `micro_batches`: rows of the same prompt side by
    side, so a pass runs their shared prompt once (logprobs.py) and holds rows of similar length."""
    return micro_batches(sorted(items, key=token_ids), size, max_tokens, lambda item: len(token_ids(item)))
