"""Supervised fine-tuning on conversations: cross-entropy on assistant tokens (every assistant turn,
or only the last), in epochs of shuffled batches, with a constant or cosine (with warm-up) schedule."""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from ..chat.prompt import prompt_token_ids
from ..chat.turn_end import trained_span
from ..core.json_types import WholeNumber
from .guard import StepGuard
from .logprobs import pad_batch, token_logprobs
from .lora import LoraHost
from .micro_batches import MICRO_BATCH_TOKENS, prompt_ordered_micro_batches
from .parallel import DistributedSync, LocalSync, padded
from .sequences import Sequence


class SFTConfig(BaseModel):
    """An SFT step's configuration, declared once (as GRPOConfig is)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    learning_rate: float = Field(default=2e-4, gt=0, le=1, allow_inf_nan=False)
    epochs: WholeNumber = Field(default=3, ge=1, le=1000)
    batch_size: WholeNumber = Field(default=8, ge=1, le=4096)
    schedule: Literal["constant", "cosine"] = "cosine"
    warmup_ratio: float = Field(default=0.1, ge=0, lt=1, allow_inf_nan=False)
    train_on: Literal["all_assistant", "last_assistant"] = "all_assistant"
    max_grad_norm: float = Field(default=1.0, gt=0, le=1e6, allow_inf_nan=False)
    micro_batch_size: WholeNumber = Field(default=16, ge=1, le=4096)
    # Padded tokens per forward/backward pass (micro_batches.py): bounds a pass's activation memory.
    micro_batch_tokens: WholeNumber = Field(default=MICRO_BATCH_TOKENS, ge=1, le=10**8)
    seed: WholeNumber = Field(default=0, ge=0, le=2**32 - 1)
    # The optimizer's moments: None starts fresh ones when the model's previous step was RL; true
    # always; false keeps them (service/optimizer_phase.py).
    reset_optimizer: bool | None = None


def sft_sequence(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    train_on: str,
    ends: set[int] | None = None,
) -> Sequence:
    """The conversation's tokens with assistant turns marked as trained. Each assistant turn's tokens
    are what the template adds for it after the generation prompt; of those, what a sampler would
    have produced is trained: its text up to and including its end-of-turn token (one of `ends`,
    chat/turn_end.py), not the template's glue after it (ChatML's newline)."""
    assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if not assistant:
        raise ValueError("the conversation has no assistant message to learn from")
    if assistant[0] == 0:  # an assistant turn is learned after what it answers; a template renders nothing before it
        raise ValueError("the conversation starts with an assistant message: begin it with the system or user message it answers")
    targets = set(assistant[-1:] if train_on == "last_assistant" else assistant)
    seq = Sequence()
    for i in assistant:
        prefix = prompt_token_ids(tokenizer, messages[:i], tools, add_generation_prompt=True)
        full = prompt_token_ids(tokenizer, messages[: i + 1], tools, add_generation_prompt=False)
        if full[: len(prefix)] != prefix:
            raise ValueError(f"the chat template is not append-only at message {i}; cannot mark its tokens")
        if prefix[: len(seq.input_ids)] != seq.input_ids:
            raise ValueError(f"the chat template rewrites earlier turns at message {i}")
        seq.extend(prefix[len(seq.input_ids) :], trained=False)
        turn = full[len(prefix) :]
        sampled = trained_span(turn, ends or set())
        seq.extend(turn[:sampled], trained=i in targets)
        seq.extend(turn[sampled:], trained=False)
    return seq


def lr_at(step: int, total: int, config: SFTConfig) -> float:
    if config.schedule == "constant":
        return config.learning_rate
    warmup = max(1, round(config.warmup_ratio * total)) if config.warmup_ratio > 0 else 0
    if step < warmup:
        return config.learning_rate * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return config.learning_rate * 0.5 * (1 + math.cos(math.pi * progress))


def train_sft(
    host: LoraHost,
    slot: str,
    optimizer: torch.optim.Optimizer | None,
    sequences: list[Sequence],
    config: SFTConfig,
    pad_id: int,
    progress: Callable[[dict[str, Any]], None] | None = None,
    guard: StepGuard | None = None,
    sync: LocalSync | DistributedSync | None = None,
) -> dict[str, Any]:
    guard = guard or StepGuard()
    sync = sync or LocalSync()
    params = host.parameters(slot)
    rng = random.Random(config.seed)
    per_epoch = math.ceil(len(sequences) / config.batch_size)
    total = per_epoch * config.epochs
    losses: list[float] = []
    started = time.perf_counter()

    def length(seq: Sequence) -> int:
        return len(seq.input_ids)

    def split(share: list[Sequence]) -> list[list[Sequence]]:
        return prompt_ordered_micro_batches(share, config.micro_batch_size, config.micro_batch_tokens, lambda s: s.input_ids)

    tokens_total = 0
    step = 0
    dropout = host.dropout_rate(slot) > 0  # LoRA dropout, in the gradient passes only
    for epoch in range(config.epochs):
        order = list(range(len(sequences)))
        rng.shuffle(order)
        for b in range(per_epoch):
            batch_seqs = [sequences[i] for i in order[b * config.batch_size : (b + 1) * config.batch_size]]
            tokens = sum(s.trained_tokens for s in batch_seqs)  # the whole batch's, on every rank
            # This rank's share, cut into micro-batches.
            micros = split(sync.shard(batch_seqs, length))
            real = len(micros)  # the rest, if any, are passes that train nothing (weight 0), for lockstep ranks
            if sync.lockstep:
                micros = padded(micros, sync.most_micro_batches(batch_seqs, length, split), batch_seqs[0])
            lr = lr_at(step, total, config)
            for group in optimizer.param_groups if optimizer is not None else []:
                group["lr"] = lr
            loss_sum = 0.0
            for m, micro in enumerate(micros):
                if not sync.lockstep:  # with a sharded base, only where the ranks meet (see grpo.train_step)
                    guard.check()
                weight = 1.0 if m < real else 0.0
                with host.lock, host.dropout(slot) if dropout else contextlib.nullcontext():
                    host.activate(slot)
                    batch = pad_batch(micro, pad_id, host.device)
                    logp, _, _ = token_logprobs(host.model, batch)
                    loss = -logp.sum() * weight / tokens  # mean over the batch's assistant tokens
                    loss.backward()
                loss_sum += float(loss.detach())
            guard.check()
            grad_norm, stats = sync.step(
                guard,
                optimizer,
                params,
                config.max_grad_norm,
                Counter({"loss": loss_sum}),
                f"epoch {epoch + 1}, batch {b + 1}",
                host.lock,
                final=step == total - 1,
            )
            loss_sum = stats["loss"]
            step += 1
            tokens_total += tokens
            losses.append(loss_sum)
            if progress:
                progress(
                    {
                        "type": "progress",
                        "gradient_step": step,
                        "gradient_steps": total,
                        "epoch": epoch + 1,
                        "loss": loss_sum,
                        "grad_norm": grad_norm,
                        "lr": lr,
                        "tokens": tokens,
                    }
                )
    return {
        "loss": losses[-1] if losses else 0.0,
        "loss_first": losses[0] if losses else 0.0,
        "gradient_steps": total,
        "tokens_trained": tokens_total,
        "forward_backward_s": time.perf_counter() - started,
        "sequences": len(sequences),
    }
