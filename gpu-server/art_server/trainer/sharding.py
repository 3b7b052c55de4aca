"""--train-shard-base: the frozen base model sharded across the trainer ranks with FSDP2
(torch.distributed.fsdp.fully_shard), for a base model that does not fit one device.

Each rank keeps 1/N of every decoder layer's weights and all-gathers a decoder layer's weights just before the
layer runs (forward and backward), so the ranks must run their forward and backward passes in
lockstep: the training loops pad a rank that has fewer micro-batches in a gradient step with passes
that contribute nothing (parallel.py, `padded`). The LoRA adapters are added after sharding and are
plain, whole tensors on every rank: their gradients, the optimizer step and the checkpoints work as
without sharding (rank 0 steps the one optimizer and broadcasts the weights).
"""

from __future__ import annotations

from typing import Any


def shard_base(model: Any) -> Any:
    """Freezes the model and shards its decoder layers, each one FSDP unit (the bulk of the weights).
    The embeddings, final norm and head stay whole on every rank: the trainer calls the model's body
    and its head separately (logprobs.py), and a head tied to the embeddings cannot sit in two units.
    Call it on every rank, before any LoRA slot exists."""
    from torch.distributed.fsdp import fully_shard

    for p in model.parameters():
        p.requires_grad_(False)
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    if not layers:
        raise ValueError(f"--train-shard-base: found no decoder layers in {type(model).__name__} to shard")
    for layer in layers:
        fully_shard(layer)
    return model


def shard_elements(model: Any) -> dict[str, int]:
    """Elements of the base model: all of them, those in sharded layers, and this rank's part of those."""
    out = {"base_elements": 0, "sharded_elements": 0, "sharded_elements_here": 0}
    for name, p in model.named_parameters():
        if "lora_" in name:
            continue
        out["base_elements"] += p.numel()
        if hasattr(p, "to_local"):
            out["sharded_elements"] += p.numel()
            out["sharded_elements_here"] += p.to_local().numel()
    return out


def is_sharded(model: Any) -> bool:
    return any(hasattr(p, "to_local") for p in model.parameters())
