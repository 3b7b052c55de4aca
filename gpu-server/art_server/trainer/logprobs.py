"""Policy logprobs of the trained tokens of a micro-batch, computed without wasted work:

- **a shared prompt runs once**: the rollouts of a group share their prompt (and the turns of a
  step share a system message), so each distinct prompt of a micro-batch (or the prefix common to
  all its rows) is run once and its KV cache is handed to every row that continues it;
  gradients flow back through that hand-over, so the result equals running every row in full
  (tests/test_logprobs.py checks it);
- **the lm_head runs only where a trained token is predicted**, on the gathered hidden states
  (no logits for padding, prompts or other rows' positions), in chunks, each recomputed in the
  backward pass instead of keeping a [tokens, vocabulary] tensor alive.

Each token is scored under the distribution it was sampled from (its turn's temperature, min-p,
top-k and top-p: core/distribution.py), so the trainer's logprob of an unchanged policy equals the
sampler's. A truncated token is scored over the set of tokens its sampler kept (`KeptSets`), which
the step fixes before its first update (grpo_start.py), so every gradient step scores a distribution over
the same set. The head runs in float32 (core/head.py), as the hf engine's sampler runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from ..core.compat import cache_kwargs, output_cache
from ..core.distribution import KeptSets, RowTensors, processed_logprobs, sampler_mask, scaled_logits
from ..core.head import decoder_and_head, model_logits
from .sequences import Sequence

MIN_SHARED_PREFIX = 8  # shorter prompts are not worth a separate forward
LM_HEAD_CHUNK = 1024  # predicted positions per lm_head chunk


@dataclass
class Batch:
    """A micro-batch as two parts. The prompts: each distinct prompt once, left-padded, [K, P]. The
    suffixes: each row's tokens after its prompt, right-padded, [B, S]; `row_prompt[b]` says which
    prompt row b continues. `predicting[b, t]`: suffix position t predicts a trained token (t + 1).
    With no prompt worth sharing, K is 0 and the suffixes are the whole rows."""

    prompt_ids: torch.Tensor  # [K, P]
    prompt_mask: torch.Tensor  # [K, P]
    row_prompt: torch.Tensor  # [B]
    prompt_lengths: torch.Tensor  # [B] real prompt tokens before each row's suffix
    input_ids: torch.Tensor  # [B, S]
    attention_mask: torch.Tensor  # [B, S]
    predicting: torch.Tensor  # [B, S] bool
    old: torch.Tensor  # [B, S] sampling logprob of suffix token t (0 where untrained)
    # Per trained token, in token_rows order: the parameters it was sampled with, and the policy step
    # that sampled it (sequences.UNKNOWN_STEP where not recorded).
    params: RowTensors  # [N] each
    sampled_by: torch.Tensor  # [N] long

    @property
    def truncates(self) -> torch.Tensor:
        """[N] bool: trained tokens whose sampling kept only some tokens (they need kept sets)."""
        return self.params.truncates

    @property
    def token_rows(self) -> torch.Tensor:
        """For each trained token, in the order token_logprobs returns them: its row."""
        return self.predicting.nonzero(as_tuple=True)[0]

    def old_logprobs(self) -> torch.Tensor:
        rows, cols = self.predicting.nonzero(as_tuple=True)
        return self.old[rows, cols + 1]


def prompt_split(seqs: list[Sequence]) -> list[int]:
    """Where each row's shared part ends, by whichever plan runs the fewest tokens:
    - each row's own prompt, run once per distinct prompt (the rollouts of a group);
    - the prefix common to every row, run once (different boards after one system message);
    - nothing shared (0 for every row).
    A shared part stops before the position that predicts the row's first trained token (that
    position needs the row's own hidden state)."""
    if len(seqs) < 2:
        return [0] * len(seqs)
    cuts = [max(0, (s.trained.index(True) if True in s.trained else len(s.input_ids)) - 1) for s in seqs]
    common = 0
    first = seqs[0].input_ids
    while common < min(cuts) and all(s.input_ids[common] == first[common] for s in seqs[1:]):
        common += 1
    total = sum(len(s.input_ids) for s in seqs)
    distinct = {tuple(s.input_ids[:cut]) for s, cut in zip(seqs, cuts)}
    plans = [([0] * len(seqs), total), ([common] * len(seqs), total - common * (len(seqs) - 1))]
    if min(cuts) >= MIN_SHARED_PREFIX:
        plans.append((cuts, total - sum(cuts) + sum(len(p) for p in distinct)))
    best, cost = min(plans, key=lambda plan: plan[1])
    return best if max(best) >= MIN_SHARED_PREFIX and cost < total else [0] * len(seqs)


def pad_batch(seqs: list[Sequence], pad_id: int, device: torch.device) -> Batch:
    cuts = prompt_split(seqs)
    prompts: dict[tuple[int, ...], int] = {}
    row_prompt = [prompts.setdefault(tuple(s.input_ids[:cut]), len(prompts)) for s, cut in zip(seqs, cuts)]
    keys = list(prompts) if any(cuts) else []
    width = max((len(k) for k in keys), default=0)
    prompt_ids = torch.full((len(keys), width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(keys), width), dtype=torch.long)
    for k, key in enumerate(keys):  # left padding: every prompt ends where its suffixes start
        if key:
            prompt_ids[k, width - len(key) :] = torch.tensor(key)
            prompt_mask[k, width - len(key) :] = 1
    width = max(len(s.input_ids) - cut for s, cut in zip(seqs, cuts))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    trained = torch.zeros((len(seqs), width), dtype=torch.bool)
    old = torch.zeros((len(seqs), width), dtype=torch.float32)
    for row, (s, cut) in enumerate(zip(seqs, cuts)):
        n = len(s.input_ids) - cut
        ids[row, :n] = torch.tensor(s.input_ids[cut:])
        mask[row, :n] = 1
        trained[row, :n] = torch.tensor(s.trained[cut:])
        old[row, :n] = torch.tensor(s.old_logprobs[cut:], dtype=torch.float32)
    predicting = torch.zeros_like(trained)
    predicting[:, :-1] = trained[:, 1:]
    rows, cols = predicting.nonzero(as_tuple=True)
    at = [(seqs[r], cuts[r] + c + 1) for r, c in zip(rows.tolist(), cols.tolist())]
    return Batch(
        prompt_ids.to(device),
        prompt_mask.to(device),
        torch.tensor(row_prompt, device=device),
        torch.tensor(cuts, device=device),
        ids.to(device),
        mask.to(device),
        predicting.to(device),
        old.to(device),
        RowTensors.of([s.sampling[t] for s, t in at], device),
        torch.tensor([s.sampled_by[t] for s, t in at], dtype=torch.long, device=device),
    )


def hidden_states(model: Any, batch: Batch) -> torch.Tensor:
    """Final hidden states of every row's suffix: [B, S, H]."""
    decoder, _ = decoder_and_head(model)
    if not len(batch.prompt_ids):
        return decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).last_hidden_state
    from transformers import DynamicCache

    positions = (batch.prompt_mask.cumsum(-1) - 1).clamp(min=0)
    prompts = decoder(
        input_ids=batch.prompt_ids,
        attention_mask=batch.prompt_mask,
        position_ids=positions,
        use_cache=True,
        **cache_kwargs(decoder, DynamicCache()),
    )
    cache = output_cache(prompts)
    for layer in cache.layers:  # each row sees its prompt's keys and values (gradients flow back)
        layer.keys = layer.keys.index_select(0, batch.row_prompt)
        layer.values = layer.values.index_select(0, batch.row_prompt)
    width = batch.input_ids.shape[1]
    positions = batch.prompt_lengths[:, None] + torch.arange(width, device=batch.input_ids.device)[None]
    mask = torch.cat([batch.prompt_mask.index_select(0, batch.row_prompt), batch.attention_mask], dim=1)
    out = decoder(
        input_ids=batch.input_ids, attention_mask=mask, position_ids=positions, use_cache=True, **cache_kwargs(decoder, cache)
    )
    return out.last_hidden_state


def _chunk_logprobs(
    model: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    params: RowTensors,
    kept: KeptSets | None,
    fill: torch.Tensor,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logprobs of `targets` (and entropies), each truncated row over its kept set in `kept` (this
    chunk's part); rows in `fill` get their kept set from these logits (returned as their
    removed-token mask [n, V], False elsewhere: deterministic, so a recomputation in the backward
    pass finds the same). The [n, V] mask of `kept` is built here, so it lives only while this runs."""
    logits = model_logits(model, hidden)
    removed = kept.removed(logits.shape[-1]) if kept is not None else None
    found = torch.zeros(0, dtype=torch.bool, device=logits.device)
    if bool(fill.any()):
        with torch.no_grad():
            found = sampler_mask(scaled_logits(logits.detach(), params.temperature), params)
            found = found & fill[:, None] if found is not None else torch.zeros_like(logits, dtype=torch.bool)
            rows = fill.nonzero(as_tuple=True)[0]
            found[rows, targets[rows]] = False  # the sampled token was kept (see KeptSets.add)
        removed = found if removed is None else removed | found
    # Every truncated row has its kept set (token_logprobs checked it) or takes it here: nothing is
    # recomputed from these logits.
    logp = processed_logprobs(logits, params, removed, from_logits=False)
    picked = logp.gather(-1, targets[:, None]).squeeze(-1)
    if not with_entropy:
        return picked, picked.new_zeros(0), found
    with torch.no_grad():  # a diagnostic only; xlogy: truncated tokens (p = 0) add 0, not nan
        entropy = -torch.xlogy(logp.exp(), logp.exp()).sum(-1)
    return picked, entropy, found


class MissingKeptSets(RuntimeError):
    """A truncated token would be scored without its sampler's kept set (a bug: see grpo_start.py)."""


def token_logprobs(
    model: Any,
    batch: Batch,
    with_entropy: bool = False,
    kept: KeptSets | None = None,
    fill: torch.Tensor | bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, KeptSets | None]:
    """Logprobs (flat, row-major over the trained positions) of each trained token under the model,
    each under the distribution its turn was sampled from; token t is predicted at position t-1. With
    `with_entropy`, also the entropy of that distribution at each position.

    A truncated token is scored over its kept set in `kept`; one without takes the set this pass's
    own logits keep (no gradient), when `fill` allows it (True, or [N] bool per token): that is its
    sampler's set only while the model is the policy that sampled it. Returns the kept sets used
    (`kept` with those filled in), or None when nothing truncates."""
    hidden = hidden_states(model, batch)
    rows, cols = batch.predicting.nonzero(as_tuple=True)
    gathered = hidden[rows, cols]  # [N, H]
    targets = batch.input_ids[rows, cols + 1]
    truncates = batch.truncates
    needed = truncates if kept is None else truncates & ~kept.covered
    if bool(needed.any()):
        allowed = fill if isinstance(fill, torch.Tensor) else torch.full_like(needed, bool(fill))
        if bool((needed & ~allowed).any()):
            raise MissingKeptSets(f"{int((needed & ~allowed).sum())} truncated tokens have no kept set from their sampler")
        kept = kept if kept is not None else KeptSets.empty(len(targets), targets.device)
    picked, entropies = [], []
    for start in range(0, len(targets), LM_HEAD_CHUNK):
        part = slice(start, start + LM_HEAD_CHUNK)
        stop = min(start + LM_HEAD_CHUNK, len(targets))
        sets = kept.part(start, stop) if kept is not None else None
        args = (gathered[part], targets[part], batch.params[part], sets, needed[part], with_entropy)
        if len(targets) > LM_HEAD_CHUNK and torch.is_grad_enabled():  # recompute in backward: bounded memory
            lp, ent, found = checkpoint(_chunk_logprobs, model, *args, use_reentrant=False)
        else:
            lp, ent, found = _chunk_logprobs(model, *args)
        if bool(needed[part].any()):  # the sets this pass's own logits kept, recorded once
            assert kept is not None
            positions = needed[part].nonzero(as_tuple=True)[0]
            kept.add(positions + start, found[positions], targets[part][positions])
        picked.append(lp)
        entropies.append(ent)
    if not picked:  # no trained token
        empty = gathered.new_zeros(0, dtype=torch.float32)
        return empty, (empty if with_entropy else None), kept
    return torch.cat(picked), (torch.cat(entropies) if with_entropy else None), kept


def record_kept_sets(model: Any, batch: Batch, rows: torch.Tensor, kept: KeptSets | None) -> KeptSets:
    """Adds to `kept` the kept sets of the trained tokens `rows` ([N] bool) under `model` as it is
    (no gradient; the head runs at those positions only): the pass that finds the sets of tokens an
    earlier step's policy sampled, with that step's adapter active."""
    with torch.no_grad():
        hidden = hidden_states(model, batch)
        at, cols = batch.predicting.nonzero(as_tuple=True)
        targets = batch.input_ids[at, cols + 1]
        kept = kept if kept is not None else KeptSets.empty(len(targets), targets.device)
        positions = rows.nonzero(as_tuple=True)[0]
        for start in range(0, len(positions), LM_HEAD_CHUNK):
            part = positions[start : start + LM_HEAD_CHUNK]
            logits = model_logits(model, hidden[at[part], cols[part]])
            params = batch.params[part]
            removed = sampler_mask(scaled_logits(logits, params.temperature), params)
            if removed is not None:
                kept.add(part, removed, targets[part])
    return kept
