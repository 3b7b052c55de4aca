"""Building OpenAI chat-completion objects from sampled tokens (the hf engine's output side)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..chat.tool_calls import parse_tool_calls


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE maps each byte to a printable character; this is the inverse."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class TokenText:
    """Per-token strings and bytes for logprobs entries, exact for byte-level BPE tokens."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.added = set(tokenizer.get_added_vocab().keys())
        # token id -> (text, byte values); at most the vocabulary. Every response lists each of its
        # tokens, and asking the tokenizer each time was a tenth of the server thread's time.
        self._pieces: dict[int, tuple[str, list[int]]] = {}

    def bytes_of(self, token_id: int) -> bytes:
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if piece is None:
            return b""
        if piece in self.added:
            return piece.encode("utf8")
        decoder = _byte_decoder()
        try:
            return bytes(decoder[ch] for ch in piece)
        except KeyError:  # not a byte-level vocabulary (e.g. sentencepiece): best effort
            return self.tokenizer.decode([token_id]).encode("utf8")

    def piece(self, token_id: int) -> tuple[str, list[int]]:
        """The token's text and bytes, as logprobs entries show them (shared: do not modify)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            raw = self.bytes_of(token_id)
            piece = self._pieces[token_id] = (raw.decode("utf8", errors="replace"), list(raw))
        return piece

    def entry(self, token_id: int, logprob: float, top: list[tuple[int, float]] | None) -> dict[str, Any]:
        text, raw = self.piece(token_id)
        item: dict[str, Any] = {"token": text, "logprob": logprob, "bytes": raw}
        item["top_logprobs"] = [{"token": (p := self.piece(t))[0], "logprob": lp, "bytes": p[1]} for t, lp in (top or [])]
        return item


@dataclass
class ChoiceState:
    """Everything sampled for one choice."""

    index: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None


def truncate_at_stop(text: str, stop: list[str]) -> tuple[str, str | None]:
    """The text up to the earliest stop string, and that stop string (None when none occurs)."""
    hits = [(i, s) for s in stop if (i := text.find(s)) >= 0]
    if not hits:
        return text, None
    cut, matched = min(hits)
    return text[:cut], matched


def finish_choice(tokenizer: Any, state: ChoiceState, stop: list[str], parse_tools: bool) -> dict[str, Any]:
    """The `message` and `finish_reason` of a finished choice, and (vLLM's field) the `stop_reason`
    string that ended it, when one did."""
    text = tokenizer.decode(state.token_ids, skip_special_tokens=True)
    text, stopped = truncate_at_stop(text, stop)
    reason = "stop" if stopped is not None else (state.finish_reason or "stop")
    message: dict[str, Any] = {"role": "assistant", "content": text}
    extra = {"stop_reason": stopped} if stopped is not None else {}
    if parse_tools:
        content, calls = parse_tool_calls(text)
        if calls:
            message["content"] = content
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
            ]
            reason = "tool_calls"
    return {"message": message, "finish_reason": reason, **extra}


def completion_object(
    request_id: str, model: str, prompt_ids: list[int], choices: list[dict[str, Any]], completion_tokens: int
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        },
        "prompt_token_ids": prompt_ids,
    }


def chunk_object(request_id: str, model: str, created: int, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices, **extra}


class StreamText:
    """Incremental text for streaming: holds back an unfinished UTF-8 sequence, anything that could
    still become a stop string, and (with tools) everything from a `<tool_call>` on."""

    TOOL_OPEN = "<tool_call>"

    def __init__(self, tokenizer: Any, stop: list[str], parse_tools: bool):
        self.tokenizer = tokenizer
        self.stop = stop
        self.parse_tools = parse_tools
        self.sent = 0
        self.stopped = False

    def _safe_end(self, text: str) -> int:
        end = len(text)
        while end and text[end - 1] == "\ufffd":
            end -= 1
        guards = list(self.stop) + ([self.TOOL_OPEN] if self.parse_tools else [])
        for guard in guards:
            for k in range(min(len(guard) - 1, end), 0, -1):
                if text[:end].endswith(guard[:k]):
                    end -= k
                    break
        if self.parse_tools and (i := text.find(self.TOOL_OPEN)) >= 0:
            end = min(end, i)
        return max(end, self.sent)

    def delta(self, token_ids: list[int]) -> str:
        if self.stopped:
            return ""
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        text, hit = truncate_at_stop(text, self.stop)
        end = len(text) if hit is not None else self._safe_end(text)
        self.stopped = hit is not None
        out = text[self.sent : end]
        self.sent = end
        return out

    def rest(self, token_ids: list[int]) -> str:
        """What is still held back once the choice finished (unless it holds tool calls)."""
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        text, _ = truncate_at_stop(text, self.stop)
        out = text[self.sent :]
        self.sent = len(text)
        return out
