"""The distribution a token is sampled from, given the model's logits and a request's sampling
parameters: temperature, then top-k, then top-p (in vLLM's order). The sampler draws from it and
returns each token's logprob under it; the trainer scores each sampled turn under the same one, with
that turn's own parameters, so the importance ratio starts at 1 (see docs/training.md, "Sampling
parameters").

Temperature 0 means greedy decoding; its logprobs come from the raw logits (temperature 1), not
from logits divided by a tiny number. A temperature below GREEDY_BELOW is greedy too (as in vLLM):
dividing float32 logits by 1e-38 overflows to infinities, which sample garbage.

Truncated sampling (top_p < 1 or top_k > 0) renormalises over the tokens it keeps: a token outside
them cannot have been sampled, so the trainer scores the same truncated distribution (scoring the
full one instead puts log(kept mass) < 0 into every ratio; measured in tests/test_sampling_params.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS


@dataclass(frozen=True)
class SamplingParams:
    """What shapes the distribution: the effective values (1.0, 1.0, 0 when a request leaves them out)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @classmethod
    def of_request(cls, body: dict[str, Any]) -> SamplingParams:
        """The effective parameters of a chat request (None: the default; top_k -1 or 0: off)."""
        temperature, top_p, top_k = body.get("temperature"), body.get("top_p"), body.get("top_k")
        return cls(
            float(temperature) if temperature is not None else 1.0,
            float(top_p) if top_p is not None else 1.0,
            int(top_k) if top_k is not None and int(top_k) > 0 else 0,
        )

    def wire(self, engine: str) -> dict[str, Any]:
        """As recorded on a sampled choice (`art_sampling`)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "engine": engine}


def truncation_mask(scaled: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor | None:
    """[N, V] True where top-k, then top-p, removes a token of temperature-scaled logits `scaled`
    (rows with top_p 1 and top_k 0 keep everything); None when no row truncates. No gradient."""
    vocab = scaled.shape[-1]
    by_k = (top_k > 0) & (top_k < vocab)
    by_p = top_p < 1.0
    if not bool(by_k.any()) and not bool(by_p.any()):
        return None
    with torch.no_grad():
        scaled = scaled.detach()
        removed = torch.zeros_like(scaled, dtype=torch.bool)
        if bool(by_k.any()):
            k = torch.where(by_k, top_k, 1)
            kth = torch.topk(scaled, int(k.max())).values.gather(-1, (k - 1)[:, None])
            removed |= by_k[:, None] & (scaled < kth)
        if bool(by_p.any()):
            rows = by_p.nonzero(as_tuple=True)[0]
            kept = scaled[rows].masked_fill(removed[rows], float("-inf"))
            sorted_logits, order = torch.sort(kept, descending=True)
            probs = torch.softmax(sorted_logits, dim=-1)
            # Keep the smallest prefix whose mass reaches top_p (always at least the top token: a top_p
            # that rounds to 0 in float32 would otherwise remove every token).
            drop = (probs.cumsum(dim=-1) - probs) >= top_p[rows, None]
            drop[:, 0] = False
            removed[rows] |= torch.zeros_like(drop).scatter(-1, order, drop)
    return removed


def processed_logprobs(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probabilities [N, V] of the distribution each row is sampled from, from float32 logits
    [N, V] and per-row parameters [N] (greedy rows: the raw distribution). Differentiable in `logits`.
    `keep` [N] (token ids) is never truncated away: the trainer passes the sampled tokens, so a token
    its own logits would put just outside the nucleus still gets a finite logprob."""
    greedy = temperature < GREEDY_BELOW
    effective = torch.where(greedy, torch.ones_like(temperature), temperature)
    # Rows all at temperature 1 (greedy ones included) and untruncated, the common case, cost one
    # log_softmax, as for the model's own distribution.
    scaled = logits if bool((effective == 1.0).all()) else logits / effective[:, None]
    removed = truncation_mask(scaled, torch.where(greedy, torch.ones_like(top_p), top_p), torch.where(greedy, 0, top_k))
    if removed is not None:
        if keep is not None:
            removed[torch.arange(len(keep), device=keep.device), keep] = False
        scaled = scaled.masked_fill(removed, float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def row_tensors(
    params: list[SamplingParams], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(temperature, top_p, top_k) as [N] tensors, for processed_logprobs."""
    return (
        torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device),
        torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device),
        torch.tensor([p.top_k for p in params], dtype=torch.long, device=device),
    )
