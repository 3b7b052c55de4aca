"""The prompt cache of the hf engine: rendered and tokenized prompts by their messages, bounded in
bytes. Rollouts repeat prompts (a group samples one prompt many times): rendering the chat template
and tokenizing was a quarter of the HTTP thread's time under load."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import orjson

# No tokenizer we serve has tokens longer than this many characters: a prompt with more characters
# than context_length * this cannot fit, and is refused without tokenizing it.
MAX_CHARS_PER_TOKEN = 64
MAX_KEY_BYTES = 1 << 20  # larger prompts are tokenized each time rather than kept
INLINE_PROMPT_CHARS = 32_768  # longer prompts are tokenized in a worker thread, off the event loop


def prompt_cache_key(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> bytes:
    try:
        return orjson.dumps([messages, tools], option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson takes 64-bit integers only; a larger one anywhere in a message is still valid JSON
        return json.dumps([messages, tools], sort_keys=True, separators=(",", ":")).encode()


class PromptCache:
    """Least recently used, at most `max_bytes` of keys and ids together."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[bytes, list[int]] = OrderedDict()

    @staticmethod
    def _size(key: bytes, ids: list[int]) -> int:
        return len(key) + 8 * len(ids) + 120

    def get(self, key: bytes) -> list[int] | None:
        return self._items.get(key)

    def move_to_end(self, key: bytes) -> None:
        self._items.move_to_end(key)

    def put(self, key: bytes, ids: list[int]) -> None:
        if len(key) > MAX_KEY_BYTES or key in self._items:
            return
        self._items[key] = ids
        self.bytes += self._size(key, ids)
        while self.bytes > self.max_bytes and self._items:
            old_key, old_ids = self._items.popitem(last=False)
            self.bytes -= self._size(old_key, old_ids)

    def __len__(self) -> int:
        return len(self._items)
