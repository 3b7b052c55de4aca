"""The engine interface: what the HTTP layer and the trainer need from an inference engine (the
trainer uses nothing else of an engine).

Engines speak the OpenAI chat-completions shape (plain dicts, already validated by the HTTP
layer) and always return what training needs: `prompt_token_ids` on the response and, per choice,
the sampled `token_ids` and their logprobs (vLLM's field names, so both engines look alike).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any


class EngineError(Exception):
    """A request the engine refuses; `status` and `code` become the OpenAI-style error."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_value", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param


class Engine(ABC):
    """One base model plus any number of LoRA adapters of it, served side by side."""

    kind: str  # "hf" | "vllm"
    sleeps_for_training = False  # True: sleep() before a step trains frees the device, requests wait until wake()
    base_model: str  # the name clients use for the base model (e.g. "builtin:tiny")
    context_length: int
    tokenizer: Any  # the base model's tokenizer: the engine renders prompts with it, the trainer tokenizes with it

    def shared_model(self) -> tuple[Any, threading.RLock] | None:
        """What the trainer may train on in place: the holder of this process's model (its `.model` and
        `.device`) and the lock every forward pass runs under, or None when the engine's model lives
        elsewhere (vLLM's process) and the trainer keeps its own copy."""
        return None

    @abstractmethod
    async def chat_completion(self, body: dict[str, Any], adapter: str | None, request_id: str) -> dict[str, Any]:
        """A `chat.completion` object. `adapter` is an adapter key or None for the base model.
        Cancelling the awaiting task (the client went away) stops generating and frees the slot."""

    @abstractmethod
    def chat_completion_stream(
        self, body: dict[str, Any], adapter: str | None, request_id: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """`chat.completion.chunk` objects; closing the iterator early cancels the request."""

    @abstractmethod
    async def load_adapter(self, key: str, path: Path) -> None:
        """Makes the PEFT adapter folder at `path` servable under `key`."""

    @abstractmethod
    async def unload_adapter(self, key: str) -> None: ...

    async def sleep(self) -> None:
        """Frees accelerator memory for training; requests wait until `wake`."""

    async def wake(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    def stats(self) -> dict[str, Any]:
        return {}
