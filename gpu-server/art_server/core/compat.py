"""Differences between the transformers versions this package supports (>= 4.51, < 6)."""

from __future__ import annotations

import functools
import inspect
from typing import Any


@functools.cache
def _cache_keyword(model_class: type) -> str:
    # transformers 5.2x renamed `past_key_values` to `cache` (the old name warns, then goes away).
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """`{<the model's name for the KV cache argument>: cache}`; PEFT wrappers are looked through."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {_cache_keyword(type(base)): cache}


def output_cache(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values
