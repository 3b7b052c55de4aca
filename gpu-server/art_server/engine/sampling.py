"""Next-token sampling for a batch of sequences, each with its own parameters, returning the
logprob of each sampled token under the distribution it was actually drawn from (after
temperature, top-k and top-p), which is what the trainer's importance ratio needs.

Temperature 0 means greedy decoding; its logprobs come from the raw logits (temperature 1), not
from logits divided by a tiny number. A temperature below GREEDY_BELOW is greedy too (as in vLLM):
dividing float32 logits by 1e-38 overflows to infinities, which sample garbage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS


@dataclass
class RowParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    top_logprobs: int = 0
    generator: torch.Generator | None = None  # set when the request has a seed


@dataclass
class SampledTokens:
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)


def processed_logprobs(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """Log-probabilities of the distribution sampled from, for one row of logits (float32)."""
    if temperature < GREEDY_BELOW:
        return torch.log_softmax(logits, dim=-1)
    scaled = logits / temperature
    if top_k and 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k).values[..., -1, None]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Keep the smallest prefix whose mass reaches top_p (always at least the top token).
        remove = (probs.cumsum(dim=-1) - probs) >= top_p
        remove[..., 0] = False  # a top_p that rounds to 0 in float32 would otherwise remove every token
        sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
        scaled = torch.full_like(scaled, float("-inf")).scatter(-1, order, sorted_logits)
    return torch.log_softmax(scaled, dim=-1)


def sample(logits: torch.Tensor, rows: list[RowParams], generator: torch.Generator | None = None) -> SampledTokens:
    """Samples one token per row of `logits` [B, V]."""
    logits = logits.float()
    out = SampledTokens([], [], [])
    plain = all(r.temperature == 1.0 and r.top_p >= 1.0 and not r.top_k for r in rows)
    if plain:
        logprob_rows = torch.log_softmax(logits, dim=-1)
    else:
        logprob_rows = torch.stack([processed_logprobs(logits[i], r.temperature, r.top_p, r.top_k) for i, r in enumerate(rows)])
    greedy = [i for i, r in enumerate(rows) if r.temperature < GREEDY_BELOW]
    seeded = [i for i, r in enumerate(rows) if r.temperature >= GREEDY_BELOW and r.generator is not None]
    shared = [i for i, r in enumerate(rows) if r.temperature >= GREEDY_BELOW and r.generator is None]
    chosen = torch.empty(len(rows), dtype=torch.long, device=logits.device)
    if greedy:
        chosen[greedy] = torch.argmax(logits[greedy], dim=-1)
    drawn = shared + seeded
    if drawn:
        # Inverse-CDF sampling: one uniform per row (from the row's own generator when seeded), then a
        # batched search in the cumulative distribution. Exact, and ~17x faster than
        # torch.multinomial on CPU for a batch of 256.
        u = torch.empty(len(drawn), 1, dtype=torch.float64, device=logits.device)
        if shared:
            u[: len(shared)] = torch.rand(len(shared), 1, generator=generator, dtype=torch.float64, device=logits.device)
        for k, i in enumerate(seeded, start=len(shared)):
            u[k] = torch.rand(1, generator=rows[i].generator, dtype=torch.float64, device=logits.device)
        cdf = torch.exp(logprob_rows[drawn].double()).cumsum(dim=-1)
        picks = torch.searchsorted(cdf, u * cdf[:, -1:]).clamp_(max=logits.shape[-1] - 1).squeeze(-1)
        chosen[drawn] = picks
    picked = logprob_rows.gather(-1, chosen[:, None]).squeeze(-1)
    out.token_ids = chosen.tolist()
    out.logprobs = picked.tolist()
    k = max((r.top_logprobs for r in rows), default=0)
    if k:
        values, indices = torch.topk(logprob_rows, min(k, logprob_rows.shape[-1]), dim=-1)
        values, indices = values.tolist(), indices.tolist()
        out.top_logprobs = [list(zip(indices[i][: r.top_logprobs], values[i][: r.top_logprobs])) for i, r in enumerate(rows)]
    else:
        out.top_logprobs = [[] for _ in rows]
    return out
