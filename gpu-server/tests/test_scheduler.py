"""The continuous-batching scheduler under a load that never lets its batch empty.

The HTTP tests cover what clients see; this drives the hf engine's scheduler directly, because what
is checked here (how wide the running batch's KV cache gets) is internal: a batch that rows keep
joining and leaving must not widen by a column per step, or every decode step slows down.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from art_server.engine.hf.engine import _seed_generator, load_hf_engine
from art_server.engine.hf.sampling import RowParams
from art_server.engine.hf.scheduler import FinishEvent, Sequence

pytestmark = pytest.mark.fast  # no server process (docs/development.md#tiers)


def _run(engine, prompts: list[list[int]], max_tokens: list[int], overlap: int) -> tuple[dict[int, list[int]], int]:
    """Runs the sequences so that `overlap` are in flight at once (a new one joins when one finishes);
    returns each one's tokens and the widest batch seen."""
    scheduler = engine.scheduler
    tokens: dict[int, list[int]] = {}
    done = threading.Semaphore(0)
    widest = 0

    def submit(i: int) -> None:
        def emit(event) -> None:
            nonlocal widest
            if isinstance(event, FinishEvent):  # on the scheduler thread, between steps
                tokens[i] = list(seq.generated)
                widest = max([widest] + [b.mask.shape[1] for b in scheduler._running if b.mask is not None])
                done.release()

        seq = Sequence(
            f"r{i}",
            0,
            None,
            prompts[i],
            max_tokens[i],
            RowParams(generator=_seed_generator(i, 0, engine.device)),
            emit,
            stream=False,
        )
        scheduler.submit([seq])

    for i in range(min(overlap, len(prompts))):
        submit(i)
    for i in range(overlap, len(prompts) + overlap):
        assert done.acquire(timeout=60), "a sequence did not finish"
        if i < len(prompts):
            submit(i)
    return tokens, widest


@pytest.fixture(scope="module")
def engine(tiny_path: Path):
    engine = load_hf_engine("builtin:tiny", tiny_path, device="cpu")
    yield engine
    engine.scheduler.shutdown()


def test_a_batch_under_continuous_load_stays_as_wide_as_its_rows_need(engine):
    tokenizer = engine.tokenizer
    prompts = [tokenizer(f"Name cell {i % 7}.")["input_ids"] for i in range(120)]
    max_tokens = [4 + (i * 5) % 13 for i in range(120)]  # rows finish at different steps
    tokens, widest = _run(engine, prompts, max_tokens, overlap=12)
    assert len(tokens) == 120
    # Without trimming the width grows by one per decode step over the whole run (~250 here).
    longest = max(len(p) for p in prompts) + max(max_tokens)
    assert widest <= longest + 1, f"batch width {widest} for rows of at most {longest} tokens"


def test_joining_and_trimming_do_not_change_what_a_seeded_sequence_samples(engine):
    tokenizer = engine.tokenizer
    prompts = [tokenizer(f"Name cell {i % 5}.")["input_ids"] for i in range(24)]
    max_tokens = [3 + (i * 7) % 11 for i in range(24)]
    batched, _ = _run(engine, prompts, max_tokens, overlap=8)
    alone, _ = _run(engine, prompts, max_tokens, overlap=1)
    assert batched == alone


def _submit_together(engine, prompts: list[list[int]], max_tokens: int, seeds: list[int]) -> list[Sequence]:
    """All sequences in one submission, so they are admitted (and prefilled) as one batch."""
    done = threading.Semaphore(0)
    seqs = [
        Sequence(
            f"t{seed}",
            0,
            None,
            p,
            max_tokens,
            RowParams(generator=_seed_generator(seed, 0, engine.device)),
            lambda e: done.release() if isinstance(e, FinishEvent) else None,
            stream=False,
        )
        for p, seed in zip(prompts, seeds)
    ]
    engine.scheduler.submit(seqs)
    for _ in seqs:
        assert done.acquire(timeout=60)
    return seqs


def test_a_shared_system_prefix_and_repeated_prompts_are_prefilled_once_and_sample_the_same(engine):
    tok = engine.tokenizer
    system = "You play tic-tac-toe as X. Reply with one empty cell name, like B2. Nothing else at all."
    boards = [f"Board {i}: " + " ".join(f"C{j}" for j in range(i + 1)) for i in range(4)]
    prompts = [
        tok.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": b}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )["input_ids"]
        for b in boards
        for _ in range(2)
    ]  # each prompt twice, like the rollouts of a group
    common = next(n for n in range(min(map(len, prompts))) if len({tuple(p[: n + 1]) for p in prompts}) > 1)
    before = (engine.scheduler.prompts_prefilled, engine.scheduler.tokens_prefilled)
    together = _submit_together(engine, prompts, 8, list(range(len(prompts))))
    assert engine.scheduler.prompts_prefilled - before[0] == 4
    assert engine.scheduler.tokens_prefilled - before[1] == common + sum(len(p) - common for p in prompts[::2])
    for i, prompt in enumerate(prompts):
        alone = _submit_together(engine, [prompt], 8, [i])[0]
        assert together[i].generated == alone.generated
        assert max(abs(a - b) for a, b in zip(together[i].logprobs, alone.logprobs)) < 1e-5
