"""Choosing which LoRA adapter (or none) a forward pass of a PEFT model uses, in microseconds.

PEFT's own switches cost time in proportion to every adapter loaded: `disable_adapter()` checks the
model's status and re-enables every layer on exit, and `set_adapter()` toggles `requires_grad` on
each adapter's weights in each layer. SmolLM2-135M with 12 adapters loaded (4 models trained, each
with its served steps) paid ~340 ms per switch, more than a decode step itself; the hf engine made
one or two per decode step, so the base model decoded several times slower on a server where
models had trained (bench/serve.ts --after-training).

`use(model, slot)` sets the two attributes each LoRA layer's forward reads (`_active_adapter`,
`_disable_adapters`) on every layer, and puts back what they were when the block ends: the
trainer's active slot and its `requires_grad` flags stay as they were. For forward passes that do
not train (serving, a reference pass under no_grad); training activates its slot with PEFT's own
`set_adapter`, which also sets `requires_grad`. tests/test_adapter_switch.py fails if a PEFT release
stops reading these attributes.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator
from typing import Any

_layers_cache: weakref.WeakKeyDictionary[Any, tuple[tuple[str, ...], list[Any]]] = weakref.WeakKeyDictionary()


def lora_layers(model: Any) -> list[Any]:
    """The model's adapter layers (PEFT's BaseTunerLayer), found once per set of adapter names
    (and again after `forget`: an adapter deleted and added again under its name may wrap other layers)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    key = tuple(getattr(model, "peft_config", {}))
    cached = _layers_cache.get(model)
    if cached is None or cached[0] != key:
        cached = (key, [m for m in model.modules() if isinstance(m, BaseTunerLayer)])
        _layers_cache[model] = cached
    return cached[1]


def forget(model: Any) -> None:
    """Call after adding or deleting adapters: the next switch scans the layers again."""
    _layers_cache.pop(model, None)


# Benchmark only (bench/serve-after-training.ts): PEFT's own switches, to measure against.
PEFT_SWITCHES = os.environ.get("ART_ADAPTER_SWITCH") == "peft"


@contextlib.contextmanager
def use(model: Any, slot: str | None) -> Iterator[None]:
    """Forward passes inside the block use adapter `slot`, or the base model alone when None."""
    if PEFT_SWITCHES:
        with _peft_switch(model, slot):
            yield
        return
    layers = lora_layers(model)
    saved = [(layer._active_adapter, layer._disable_adapters) for layer in layers]
    for layer in layers:
        if slot is None:
            layer._disable_adapters = True
        else:
            layer._active_adapter = slot
            layer._disable_adapters = False
    try:
        yield
    finally:
        for layer, (active, disabled) in zip(layers, saved):
            layer._active_adapter = active
            layer._disable_adapters = disabled


@contextlib.contextmanager
def _peft_switch(model: Any, slot: str | None) -> Iterator[None]:
    active = model.active_adapter
    if slot is None:
        with model.disable_adapter():
            yield
        return
    model.set_adapter(slot)
    try:
        yield
    finally:
        model.set_adapter(active)
