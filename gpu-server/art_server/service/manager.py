"""The one base model this server holds and the adapters served on top of it."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..core.config import ServerConfig
from ..core.distribution import generation_defaults, generation_defaults_notice
from ..core.names import NameError_, adapter_key, split_adapter_name
from ..core.provenance import Provenance, base_fingerprint, server_identity
from ..engine.base import Engine, EngineError
from ..models.adapter_folder import AdapterFolderError, base_weight_shapes, check_adapter_folder
from ..models.resolve import ModelNotFound, resolve_base_model

__all__ = ["BaseModelConflict", "ModelManager", "ModelNotFound", "ServedAdapter"]

log = logging.getLogger(__name__)


class BaseModelConflict(RuntimeError):
    pass


@dataclass
class ServedAdapter:
    name: str
    step: int
    path: Path
    created: int = field(default_factory=lambda: int(time.time()))


class ModelManager:
    def __init__(self, config: ServerConfig):
        self.config = config
        self.engine: Engine | None = None
        self.base_model: str | None = None
        self.adapters: dict[str, dict[int, ServedAdapter]] = {}
        self.base_path: Path | None = None
        self.base_source: dict = {}  # where the base model's weights came from (resolve.py)
        self.created = int(time.time())
        self._lock = asyncio.Lock()
        # Requests being served per adapter key; an adapter removed while some still run is
        # unloaded when the last one ends (a step pushed out by a newer one, or an unload request).
        self._in_use: Counter[str] = Counter()
        self._doomed: set[str] = set()
        self._unloads: set[asyncio.Task] = set()
        self._provenance: Provenance | None = None
        self._base_shapes: dict[str, tuple[int, ...]] | None = None  # read once, for adapter folder checks
        from .training import TrainingService

        self.training = TrainingService(self)

    async def ensure_base(self, name: str) -> Engine:
        """Loads `name` when no base model is loaded; refuses a different one."""
        async with self._lock:
            if self.engine is not None:
                if name != self.base_model:
                    raise BaseModelConflict(
                        f"this server holds base model {self.base_model!r}; it cannot also serve {name!r}. "
                        "Start another server (or a new backend) for that base model."
                    )
                return self.engine
            from ..engine.factory import create_engine

            resolved = await asyncio.to_thread(resolve_base_model, name, self.config.data_dir, self.config.model_cache)
            log.info("base model %s: loading from %s", name, resolved.describe())
            defaults = generation_defaults(resolved.path)
            if defaults:
                log.warning("%s", generation_defaults_notice(name, defaults))
            self.engine = await create_engine(self.config, name, resolved.path)
            self.base_model = name
            self.base_path = resolved.path
            self.base_source = resolved.source
            fingerprint = await asyncio.to_thread(base_fingerprint, resolved.path)
            self._provenance = Provenance(fingerprint, *server_identity(self.config.data_dir))
            # The model, tokenizer and libraries live as long as the server: keep the garbage
            # collector from rescanning them (a full collection took ~0.1 s under load).
            gc.freeze()
            return self.engine

    @property
    def provenance(self) -> Provenance:
        """Tags and checks sampled choices (core/provenance.py); exists once the base model is loaded."""
        if self._provenance is None:
            raise ModelNotFound("no base model is loaded yet: start the server with --base-model, or register a model")
        return self._provenance

    def require_engine(self) -> Engine:
        if self.engine is None:
            raise ModelNotFound("no base model is loaded yet: start the server with --base-model, or register a model")
        return self.engine

    def resolve(self, model: str) -> str | None:
        """The adapter key to serve `model` with, None for the base model; ModelNotFound otherwise."""
        self.require_engine()
        if model == self.base_model:
            return None
        try:
            name, step = split_adapter_name(model)
        except NameError_ as error:
            raise ModelNotFound(str(error)) from None
        steps = self.adapters.get(name)
        if not steps:
            raise ModelNotFound(f"model {model!r} does not exist on this server; GET /v1/models lists what it serves")
        if step is None:
            step = max(steps)
        if step not in steps:
            raise ModelNotFound(f"model {name!r} has no step {step} loaded; loaded steps: {sorted(steps)}")
        return adapter_key(name, step)

    async def resolve_wait(self, model: str) -> str | None:
        """Like `resolve`, but a bare trainable-model name waits while its next step trains (so it is
        served by the new step), and a step saved on disk but not loaded is loaded first."""
        self.require_engine()
        trainable = self.training.models.get(model)
        if trainable is not None and not trainable.serve_previous:
            await trainable.gate.wait()
        try:
            name, step = split_adapter_name(model)
        except NameError_:
            return self.resolve(model)
        trainable = self.training.models.get(name)
        if trainable is not None and step is not None and step not in self.adapters.get(name, {}):
            path = self.training.checkpoint_path(name, step)
            if path is not None:
                await self.add_adapter(name, step, path)
        return self.resolve(model)

    async def add_adapter(self, name: str, step: int, path: Path, checked: bool = True) -> None:
        """Serves the adapter folder `path` as name@step; `checked=False` skips reading it through
        first, for a checkpoint this server has just written or loaded into its trainer."""
        engine = self.require_engine()
        if checked:
            if self._base_shapes is None:
                assert self.base_path is not None  # require_engine: a base model is loaded
                self._base_shapes = await asyncio.to_thread(base_weight_shapes, self.base_path)
            try:
                await asyncio.to_thread(check_adapter_folder, path, self._base_shapes)
            except AdapterFolderError as error:
                raise EngineError(str(error), code="invalid_adapter", param="lora_path") from None
        key = adapter_key(name, step)
        if key in self._doomed:  # removed, but its requests still run: still loaded, keep it
            self._doomed.discard(key)
        else:
            await engine.load_adapter(key, path)
        self.adapters.setdefault(name, {})[step] = ServedAdapter(name, step, path)

    def acquire(self, key: str | None) -> None:
        """A request starts on adapter `key` (None: the base model)."""
        if key is not None:
            self._in_use[key] += 1

    def requests_running(self, name: str) -> int:
        """How many requests are being served by the adapters of model `name` now."""
        return sum(self._in_use[adapter_key(name, step)] for step in self.adapters.get(name, {}))

    def release(self, key: str | None) -> None:
        """A request on `key` ended; a removed adapter whose last request this was is unloaded now."""
        if key is None:
            return
        self._in_use[key] -= 1
        if self._in_use[key] <= 0:
            del self._in_use[key]
            if key in self._doomed:
                task = asyncio.get_running_loop().create_task(self._unload_doomed(key))
                self._unloads.add(task)
                task.add_done_callback(self._unloads.discard)

    async def _unload_doomed(self, key: str) -> None:
        if key in self._doomed and not self._in_use[key]:
            self._doomed.discard(key)
            try:
                await self.require_engine().unload_adapter(key)
            except Exception:  # nothing waits on this: log it, the adapter stays loaded
                log.exception("unloading %s failed", key)

    async def remove_adapter(self, name: str, step: int) -> None:
        engine = self.require_engine()
        if step not in self.adapters.get(name, {}):
            raise ModelNotFound(f"model {adapter_key(name, step)!r} is not loaded")
        key = adapter_key(name, step)
        del self.adapters[name][step]  # new requests no longer resolve to it
        if not self.adapters[name]:
            del self.adapters[name]
        if self._in_use[key]:
            self._doomed.add(key)  # unloaded by the release of its last request
        else:
            self._in_use.pop(key, None)
            await engine.unload_adapter(key)

    def listing(self) -> list[dict]:
        if self.base_model is None:
            return []
        cards = [
            {"id": self.base_model, "created": self.created, "root": self.base_model, "parent": None, "source": self.base_source}
        ]
        for name, steps in sorted(self.adapters.items()):
            latest = max(steps)
            for step, adapter in sorted(steps.items()):
                cards.append(
                    {
                        "id": adapter_key(name, step),
                        "created": adapter.created,
                        "root": self.base_model,
                        "parent": self.base_model,
                    }
                )
            cards.append(
                {"id": name, "created": steps[latest].created, "root": self.base_model, "parent": adapter_key(name, latest)}
            )
        return cards

    async def close(self) -> None:
        await self.training.stop()  # each running step rolls back, or completes if past its commit
        if self.engine is not None:
            await self.engine.close()
