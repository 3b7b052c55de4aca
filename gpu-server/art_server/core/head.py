"""The output head (lm_head) in float32, whatever dtype the model runs in.

The sampler's and the trainer's logits go through the same head. In bf16 the head's output is
rounded to 8 bits of mantissa, about 0.06 at a logit of 16: the two sides then disagree by a rounding
step wherever their hidden states differ in the last bit (incremental decoding with a KV cache vs one
full forward pass). In float32 the head adds no rounding of its own (measured on SmolLM2 in bf16, the
trainer/sampler gap per token: docs/training.md). Both the hf engine's decode steps and the trainer
use `float32_logits`; the float32 copy of the head's weight is made once and kept (a LoRA adapter
never trains it: a head wrapped by one runs as it is).

`decoder_and_head` splits a causal LM (PEFT-wrapped or not) into its transformer body and its head;
`model_logits` applies what some architectures do after the head (Gemma's final soft-capping,
Cohere's logit scale, Granite's logit scaling), so both sides compute the model's own logits.
Architectures with other post-head transforms (MiniCPM's, Falcon-H1's multipliers) are not covered:
their `samplerLogprobDiffMean` would show it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

_CACHE = "_art_float32_weight"  # (the weight's data_ptr and version, its float32 copy)


def _float32_weight(head: torch.nn.Linear) -> torch.Tensor:
    weight = head.weight
    key = (weight.data_ptr(), weight._version, weight.device)
    cached = getattr(head, _CACHE, None)
    if cached is None or cached[0] != key:
        # A normal tensor even when first made under the engine's inference_mode: the trainer's
        # backward pass reads it too.
        with torch.inference_mode(False), torch.no_grad():
            cached = (key, weight.detach().float())
        setattr(head, _CACHE, cached)
    return cached[1]


def float32_logits(head: Any, hidden: torch.Tensor) -> torch.Tensor:
    """`head(hidden)` computed in float32 (differentiable in `hidden`)."""
    if type(head) is not torch.nn.Linear or head.weight.dtype == torch.float32:
        return head(hidden).float()  # float32 already, or a head with a LoRA layer of its own
    bias = head.bias.detach().float() if head.bias is not None else None
    return F.linear(hidden.float(), _float32_weight(head), bias)


def decoder_and_head(model: Any) -> tuple[Any, Any]:
    """The transformer body (hidden states, no lm_head) and the lm_head; LoRA layers are injected in
    place, so the body runs the active adapter."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.base_model, base.get_output_embeddings()


def model_logits(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The model's float32 logits from its final hidden states `hidden` [..., H]."""
    _, head = decoder_and_head(model)
    logits = float32_logits(head, hidden)
    config = (model.get_base_model() if hasattr(model, "get_base_model") else model).config
    config = getattr(config, "text_config", None) or config
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    scale = getattr(config, "logit_scale", None)
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        logits = logits * scale
    scaling = getattr(config, "logits_scaling", None)
    if isinstance(scaling, (int, float)) and not isinstance(scaling, bool) and scaling != 1:
        logits = logits / scaling
    return logits
