"""How a rank's share of a step is cut into forward/backward passes (trainer/micro_batches.py):
at most `size` rows and at most `max_tokens` padded tokens (rows x the longest row) per pass."""

from __future__ import annotations

import pytest

from art_server.trainer.micro_batches import micro_batches

pytestmark = pytest.mark.fast


def cut(lengths: list[int], size: int, max_tokens: int) -> list[list[int]]:
    return micro_batches(lengths, size, max_tokens, lambda n: n)


def test_short_rows_are_cut_by_count_only():
    assert cut([10] * 5, size=2, max_tokens=4096) == [[10, 10], [10, 10], [10]]


def test_long_rows_are_cut_by_their_padded_tokens():
    # 700-token tool conversations: 5 fit in 4096 padded tokens (3500), a sixth would make 4200
    assert [len(m) for m in cut([700] * 12, size=16, max_tokens=4096)] == [5, 5, 2]


def test_the_padded_size_counts_the_longest_row_not_the_sum():
    # 100 + 100 + 1000 is 1200 tokens, but padded to the longest row it is 3 x 1000
    assert cut([100, 100, 1000, 1000], size=16, max_tokens=2500) == [[100, 100], [1000, 1000]]


def test_a_row_longer_than_the_budget_goes_alone_and_nothing_is_lost():
    assert cut([50, 5000, 60, 70], size=16, max_tokens=1000) == [[50], [5000], [60, 70]]
    lengths = [3, 900, 17, 250, 250, 4000, 1, 1]
    for size in (1, 2, 16):
        for budget in (1, 500, 4096):
            micros = cut(lengths, size, budget)
            assert [n for m in micros for n in m] == lengths  # in order, every row once
            assert all(len(m) <= size for m in micros)
            assert all(len(m) == 1 or len(m) * max(m) <= budget for m in micros)


def test_nothing_makes_no_micro_batches():
    assert cut([], size=16, max_tokens=4096) == []
