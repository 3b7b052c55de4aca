"""The distribution a token is sampled from, given the model's logits and a request's sampling
parameters: temperature, then min-p, then top-k, then top-p (vLLM's order). The sampler draws from
it and returns each token's logprob under it; the trainer scores each sampled turn under the same
one, with that turn's own parameters, so the importance ratio starts at 1 (see docs/training.md,
"Sampling parameters").

Temperature 0 means greedy decoding; its logprobs come from the raw logits (temperature 1), not
from logits divided by a tiny number. A temperature below GREEDY_BELOW is greedy too (as in vLLM):
dividing float32 logits by 1e-38 overflows to infinities, which sample garbage.

Truncated sampling (min_p > 0, top_k > 0 or top_p < 1) renormalises over the tokens it keeps. The
trainer scores a truncated turn over the set of tokens *the sampler* kept (KeptSets, fixed when the
step starts), renormalised: then each position's scored distribution sums to 1 and the ratio to the
sampler is a likelihood ratio, whose mean under the sampler stays 1 however far the policy moves.
Recomputing the set from the moving policy instead (and forcing the sampled token back in) is not a
distribution: measured in tests/test_truncated_scoring.py.

Everything else that would reshape the distribution (penalties, logit biases, banned words) is not
scored by the trainer, so the server refuses it (UNSCORED) rather than train on a distribution it
did not sample from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS

# Request fields (OpenAI's, and vLLM's extras) that shape the sampled distribution in ways the
# trainer does not score, each with the value that leaves it alone. A chat request that sets one to
# anything else is refused with a 400 naming it (api/schemas.py), on both engines: a turn sampled
# with a repetition penalty, say, would train against a distribution nobody sampled from (measured on
# the vllm engine with one from a model's generation_config.json: a trainer/sampler gap of 0.35 per
# token, where rounding gives 1e-6).
UNSCORED: dict[str, Any] = {
    "repetition_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "logit_bias": {},
    "min_tokens": 0,
    "bad_words": [],
    "allowed_token_ids": None,
    "logits_processors": None,
    "typical_p": 1.0,
    "use_beam_search": False,
    "length_penalty": 1.0,
    "guided_json": None,
    "guided_regex": None,
    "guided_choice": None,
    "guided_grammar": None,
    "structured_outputs": None,
}

# The fields of a model's generation_config.json that serving engines apply as sampling defaults
# (vLLM's list, which it applies unless started with --generation-config vllm).
GENERATION_DEFAULTS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")


# response_format types that constrain which tokens can be sampled (chat/structured.py)
CONSTRAINING_FORMATS = ("json_object", "json_schema")


def generation_defaults(model_dir: Path) -> dict[str, Any]:
    """The sampling defaults a model's generation_config.json sets away from neutral (what vLLM would
    apply by default); the server applies none of them."""
    try:
        config = json.loads((model_dir / "generation_config.json").read_text())
    except (OSError, ValueError):
        return {}
    neutral = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, **UNSCORED}
    out = {k: config[k] for k in GENERATION_DEFAULTS if config.get(k) is not None and config[k] != neutral[k]}
    if out.get("top_k") == -1:  # vLLM's spelling of off
        out.pop("top_k")
    return out


def generation_defaults_notice(base_model: str, defaults: dict[str, Any]) -> str:
    shown = ", ".join(f"{k} {v}" for k, v in defaults.items())
    unscored = [k for k in defaults if k in UNSCORED]
    return (
        f"{base_model}'s generation_config.json suggests sampling with {shown}. This server does not apply a model's "
        "defaults (the trainer scores what each request asked for): a request that leaves a parameter out samples "
        "at temperature 1, top_p 1, without top_k or min_p"
        + (f"; {', '.join(unscored)} cannot be scored, so requests that set them are refused" if unscored else "")
        + ". Send the ones you want in each request (temperature, top_p, top_k, min_p)"
    )


def unscored_fields(body: dict[str, Any]) -> list[str]:
    """The fields of a chat request set to a value the trainer cannot score (see UNSCORED)."""
    return [name for name, neutral in UNSCORED.items() if body.get(name) is not None and body[name] != neutral]


def unscored_message(names: list[str]) -> str:
    shown = ", ".join(names)
    return (
        f"{shown} {'is' if len(names) == 1 else 'are'} not supported: {'it changes' if len(names) == 1 else 'they change'} "
        "the distribution tokens are sampled from in a way the trainer does not score (a turn sampled with "
        f"{'it' if len(names) == 1 else 'them'} would train against a distribution nobody sampled from). Leave "
        f"{'it' if len(names) == 1 else 'them'} out (or at {', '.join(f'{n} {UNSCORED[n]!r}' for n in names)}); "
        "temperature, top_p, top_k and min_p are scored exactly, and response_format enforces a JSON schema"
    )


@dataclass(frozen=True)
class SamplingParams:
    """What shapes the distribution: the effective values (temperature 1, top_p 1, top_k 0, min_p 0
    when a request leaves them out), and whether response_format constrained it."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    min_p: float = 0.0  # 0: off
    # response_format's token constraint was applied (the trainer does not score it: see grpo.prepare)
    constrained: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def truncates(self) -> bool:
        """True when sampling kept only some tokens (greedy turns are scored untruncated)."""
        return not self.greedy and (self.top_p < 1.0 or self.top_k > 0 or self.min_p > 0.0)

    @classmethod
    def of_request(cls, body: dict[str, Any]) -> SamplingParams:
        """The effective parameters of a chat request (None: the default; top_k -1 or 0: off)."""
        temperature, top_p, top_k, min_p = body.get("temperature"), body.get("top_p"), body.get("top_k"), body.get("min_p")
        return cls(
            float(temperature) if temperature is not None else 1.0,
            float(top_p) if top_p is not None else 1.0,
            int(top_k) if top_k is not None and int(top_k) > 0 else 0,
            float(min_p) if min_p is not None else 0.0,
            (body.get("response_format") or {}).get("type") in CONSTRAINING_FORMATS,
        )

    @classmethod
    def of_wire(cls, recorded: dict[str, Any]) -> SamplingParams:
        """As recorded on a choice (`art_sampling`; min_p and constrained are absent from older servers)."""
        return cls(
            recorded["temperature"],
            recorded["top_p"],
            recorded["top_k"],
            recorded.get("min_p") or 0.0,
            bool(recorded.get("constrained")),
        )

    def wire(self, engine: str) -> dict[str, Any]:
        """As recorded on a sampled choice (`art_sampling`)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "constrained": self.constrained,
            "engine": engine,
        }


def truncation_mask(
    scaled: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor, min_p: torch.Tensor | None = None
) -> torch.Tensor | None:
    """[N, V] True where min-p, then top-k, then top-p removes a token of temperature-scaled logits
    `scaled` (rows with top_p 1, top_k 0 and min_p 0 keep everything); None when no row truncates.
    No gradient. min-p and top-k each keep a prefix of the sorted order, so their order does not
    matter; top-p is taken over what they keep, renormalised (as vLLM does)."""
    vocab = scaled.shape[-1]
    by_k = (top_k > 0) & (top_k < vocab)
    by_p = top_p < 1.0
    by_min = min_p > 0.0 if min_p is not None else torch.zeros_like(by_p)
    if not bool(by_k.any()) and not bool(by_p.any()) and not bool(by_min.any()):
        return None
    with torch.no_grad():
        scaled = scaled.detach()
        removed = torch.zeros_like(scaled, dtype=torch.bool)
        if bool(by_min.any()):
            assert min_p is not None
            probs = torch.softmax(scaled, dim=-1)
            removed |= by_min[:, None] & (probs < min_p[:, None] * probs.amax(dim=-1, keepdim=True))
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


def scaled_logits(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """Logits divided by each row's temperature (greedy rows: by 1, their logprobs are the raw ones)."""
    greedy = temperature < GREEDY_BELOW
    effective = torch.where(greedy, torch.ones_like(temperature), temperature)
    # Rows all at temperature 1 (greedy ones included), the common case, divide nothing.
    return logits if bool((effective == 1.0).all()) else logits / effective[:, None]


def sampler_mask(scaled: torch.Tensor, params: RowTensors) -> torch.Tensor | None:
    """The truncation of each row's sampling parameters from these (scaled) logits; greedy rows keep all."""
    greedy = params.temperature < GREEDY_BELOW
    return truncation_mask(
        scaled,
        torch.where(greedy, torch.ones_like(params.top_p), params.top_p),
        torch.where(greedy, 0, params.top_k),
        torch.where(greedy, torch.zeros_like(params.min_p), params.min_p),
    )


def processed_logprobs(
    logits: torch.Tensor, params: RowTensors, removed: torch.Tensor | None = None, *, from_logits: bool = True
) -> torch.Tensor:
    """Log-probabilities [N, V] of the distribution each row is sampled from, from float32 logits
    [N, V] and per-row parameters (greedy rows: the raw distribution). Differentiable in `logits`.
    The sampler finds the tokens truncation removes from `logits` (`from_logits`); the trainer passes
    them, `removed` [N, V] from the sampler's kept sets (None: nothing removed)."""
    scaled = scaled_logits(logits, params.temperature)
    if from_logits:
        removed = sampler_mask(scaled, params)
    if removed is not None:
        scaled = scaled.masked_fill(removed, float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


@dataclass
class RowTensors:
    """Per-row sampling parameters as [N] tensors, for processed_logprobs."""

    temperature: torch.Tensor
    top_p: torch.Tensor
    top_k: torch.Tensor
    min_p: torch.Tensor

    @classmethod
    def of(cls, params: list[SamplingParams], device: torch.device | str = "cpu") -> RowTensors:
        return cls(
            torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device),
            torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device),
            torch.tensor([p.top_k for p in params], dtype=torch.long, device=device),
            torch.tensor([p.min_p for p in params], dtype=torch.float32, device=device),
        )

    def __getitem__(self, rows: slice | torch.Tensor) -> RowTensors:
        return RowTensors(self.temperature[rows], self.top_p[rows], self.top_k[rows], self.min_p[rows])

    @property
    def truncates(self) -> torch.Tensor:
        """[N] bool: rows whose sampling kept only some tokens."""
        greedy = self.temperature < GREEDY_BELOW
        return ~greedy & ((self.top_p < 1.0) | (self.top_k > 0) | (self.min_p > 0.0))


@dataclass
class KeptSets:
    """The tokens truncation kept at some of a micro-batch's trained positions, fixed once when the
    step starts: each position's set is the one its sampler's policy keeps, so every gradient step
    scores the policy renormalised over the same set. Stored as (position, token id) pairs, so memory
    follows the kept tokens, not the vocabulary (a pass builds one chunk's [n, V] mask at a time,
    inside the part of the pass that is recomputed in the backward). `covered` [N] says which
    positions have their set here; `whole` which of those kept every token (top_k at or over the
    vocabulary, a top_p that rounds to 1: nothing stored)."""

    covered: torch.Tensor  # [N] bool
    whole: torch.Tensor  # [N] bool
    position: torch.Tensor  # [K] long: which trained position each kept token belongs to
    token: torch.Tensor  # [K] long

    @classmethod
    def empty(cls, n: int, device: torch.device | str = "cpu") -> KeptSets:
        none = torch.zeros(0, dtype=torch.long, device=device)
        flags = torch.zeros(n, dtype=torch.bool, device=device)
        return cls(flags, flags.clone(), none, none.clone())

    def add(self, positions: torch.Tensor, removed: torch.Tensor, targets: torch.Tensor) -> None:
        """Records the sets of `positions` [M] from their masks `removed` [M, V]. Each sampled token
        `targets` [M] is kept: one the sampler kept but this recomputation drops (its kernels round
        differently at the edge of the nucleus) would otherwise have probability 0."""
        kept = ~removed
        kept[torch.arange(len(targets), device=targets.device), targets] = True
        whole = kept.all(dim=-1)
        rows, tokens = kept[~whole].nonzero(as_tuple=True)
        self.covered[positions] = True
        self.whole[positions] = whole
        self.position = torch.cat([self.position, positions[~whole][rows]])
        self.token = torch.cat([self.token, tokens])

    def part(self, start: int, stop: int) -> KeptSets:
        """The sets of positions start..stop-1, renumbered from 0."""
        inside = (self.position >= start) & (self.position < stop)
        return KeptSets(self.covered[start:stop], self.whole[start:stop], self.position[inside] - start, self.token[inside])

    def removed(self, vocab: int) -> torch.Tensor | None:
        """[n, V] True where a position's set drops a token (False on uncovered and whole rows); None
        when no position drops anything."""
        dropping = self.covered & ~self.whole
        if not bool(dropping.any()):
            return None
        mask = dropping[:, None].expand(len(dropping), vocab).clone()
        mask[self.position, self.token] = False
        return mask

    @property
    def size(self) -> int:
        return int(self.position.numel())
