"""Policy logprobs of the trained tokens of a padded micro-batch, computing the lm_head only at the
positions that predict a trained token (vocabularies are large; sequences are long)."""

from __future__ import annotations

from typing import Any

import torch

from .sequences import Sequence


def pad_batch(seqs: list[Sequence], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    width = max(len(s.input_ids) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    trained = torch.zeros((len(seqs), width), dtype=torch.bool)
    old = torch.zeros((len(seqs), width), dtype=torch.float32)
    for row, s in enumerate(seqs):
        n = len(s.input_ids)
        ids[row, :n] = torch.tensor(s.input_ids)
        mask[row, :n] = 1
        trained[row, :n] = torch.tensor(s.trained)
        old[row, :n] = torch.tensor(s.old_logprobs, dtype=torch.float32)
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "trained": trained.to(device), "old": old.to(device)}


def token_logprobs(model: Any, batch: dict[str, torch.Tensor], temperature: float = 1.0,
                   with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs (flat, in row-major order of the trained positions) of each trained token under the
    model; token t is predicted at position t-1."""
    trained = batch["trained"]
    predicting = torch.zeros_like(trained)
    predicting[:, :-1] = trained[:, 1:]
    keep = predicting.any(dim=0).nonzero().squeeze(-1)  # positions any row needs
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], logits_to_keep=keep, use_cache=False)
    logits = out.logits.float()  # [B, len(keep), V]
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    targets = batch["input_ids"][:, keep + 1]
    picked = logp.gather(-1, targets[..., None]).squeeze(-1)  # [B, len(keep)]
    rows = predicting[:, keep]
    entropy = None
    if with_entropy:  # a diagnostic only: no graph
        with torch.no_grad():
            entropy = -(logp.exp() * logp).sum(-1)[rows]
    return picked[rows], entropy
