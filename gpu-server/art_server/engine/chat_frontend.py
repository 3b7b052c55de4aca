"""The chat side every engine shares, so that engines differ only in how they sample tokens.

A request's messages and tools become prompt ids here (the model's chat template, tools in the
hermes format: chat/prompt.py), once per distinct prompt (a group samples one prompt many times);
the room left for the completion is checked here; and sampled token ids become OpenAI chat objects
here (text, stop strings, tool calls, logprobs entries). The hf engine samples in this process, the
vllm engine sends the same prompt ids to vLLM: both serve, and train on, the same tokens.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..chat.prompt import PromptError, prompt_token_ids
from .base import EngineError
from .openai_format import ChoiceState, StreamText, TokenText, chunk_object, completion_object, finish_choice
from .prompt_cache import INLINE_PROMPT_CHARS, MAX_CHARS_PER_TOKEN, PromptCache, prompt_cache_key


class ChatFrontend:
    def __init__(self, tokenizer: Any, context_length: int):
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.token_text = TokenText(tokenizer)
        # Rendering the chat template and tokenizing was a quarter of the HTTP thread's time under load.
        self._prompt_cache = PromptCache(max_bytes=64 << 20)

    @property
    def prompt_cache(self) -> PromptCache:
        return self._prompt_cache

    # -- the request side ----------------------------------------------------------------------
    async def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The prompt's token ids: from the cache, else rendered and tokenized (see INLINE_PROMPT_CHARS)."""
        key = prompt_cache_key(messages, tools)
        cached = self._prompt_cache.get(key)
        if cached is not None:
            self._prompt_cache.move_to_end(key)
            return cached
        # A prompt far longer than the context fails without being tokenized.
        chars = len(key)
        if chars > self.context_length * MAX_CHARS_PER_TOKEN:
            raise EngineError(
                f"This model's maximum context length is {self.context_length} tokens; the messages are "
                f"{chars} characters, far more. Shorten the conversation.",
                code="context_length_exceeded",
                param="messages",
            )
        try:
            # A large prompt takes seconds to render and tokenize: a worker thread does it while the
            # event loop serves everything else. A usual one takes about a millisecond: done here.
            if chars > INLINE_PROMPT_CHARS:
                ids = await asyncio.to_thread(prompt_token_ids, self.tokenizer, messages, tools)
            else:
                ids = prompt_token_ids(self.tokenizer, messages, tools)
        except PromptError as error:
            raise EngineError(str(error), param="messages") from error
        if len(ids) < self.context_length:  # prompts that are refused are not kept
            self._prompt_cache.put(key, ids)
        return ids

    def max_tokens(self, prompt: list[int], body: dict[str, Any]) -> int:
        """The completion's token budget: what the request asks for, which must fit the context."""
        room = self.context_length - len(prompt)
        if room <= 0:
            raise EngineError(
                f"This model's maximum context length is {self.context_length} tokens; the messages are {len(prompt)} tokens. "
                "Shorten the conversation.",
                code="context_length_exceeded",
                param="messages",
            )
        requested = body.get("max_completion_tokens") or body.get("max_tokens")
        if requested is not None and requested > room:
            raise EngineError(
                f"This model's maximum context length is {self.context_length} tokens; you requested {len(prompt) + requested} "
                f"({len(prompt)} in the messages, {requested} for the completion). Lower max_tokens to at most {room}.",
                code="context_length_exceeded",
                param="max_tokens",
            )
        return requested or room

    @staticmethod
    def stop_strings(body: dict[str, Any]) -> list[str]:
        stop = body.get("stop") or []
        return [stop] if isinstance(stop, str) else list(stop)

    @staticmethod
    def parses_tools(body: dict[str, Any]) -> bool:
        return bool(body.get("tools")) and body.get("tool_choice") != "none"

    # -- the answer side -----------------------------------------------------------------------
    def completion(
        self, request_id: str, model: str, prompt: list[int], states: list[ChoiceState], body: dict[str, Any]
    ) -> dict[str, Any]:
        """The `chat.completion` object of finished choices."""
        stop, parse_tools = self.stop_strings(body), self.parses_tools(body)
        choices = []
        for state in states:
            choice = {"index": state.index, **finish_choice(self.tokenizer, state, stop, parse_tools)}
            choice["logprobs"] = {
                "content": [
                    self.token_text.entry(t, lp, top if body.get("logprobs") else None)
                    for t, lp, top in zip(state.token_ids, state.logprobs, state.top_logprobs or [None] * len(state.token_ids))
                ]
            }
            choice["token_ids"] = state.token_ids
            choices.append(choice)
        return completion_object(request_id, model, prompt, choices, sum(len(s.token_ids) for s in states))


class ChatStream:
    """The `chat.completion.chunk` objects of one streamed request, built as tokens arrive."""

    def __init__(self, frontend: ChatFrontend, request_id: str, model: str, created: int, body: dict[str, Any], n: int):
        self.frontend = frontend
        self.request_id, self.model, self.created, self.body = request_id, model, created, body
        self.stop, self.parse_tools = frontend.stop_strings(body), frontend.parses_tools(body)
        self.states = [ChoiceState(i) for i in range(n)]
        self.texts = [StreamText(frontend.tokenizer, self.stop, self.parse_tools) for _ in range(n)]

    def first(self, prompt: list[int]) -> dict[str, Any]:
        return chunk_object(
            self.request_id,
            self.model,
            self.created,
            [
                {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
                for i in range(len(self.states))
            ],
            prompt_token_ids=prompt,
        )

    def token(self, index: int, token_id: int, logprob: float, top: list[tuple[int, float]] | None) -> dict[str, Any]:
        state = self.states[index]
        state.token_ids.append(token_id)
        state.logprobs.append(logprob)
        entry = self.frontend.token_text.entry(token_id, logprob, top if self.body.get("logprobs") else None)
        return chunk_object(
            self.request_id,
            self.model,
            self.created,
            [
                {
                    "index": index,
                    "delta": {"content": self.texts[index].delta(state.token_ids)},
                    "logprobs": {"content": [entry]},
                    "finish_reason": None,
                    "token_ids": [token_id],
                }
            ],
        )

    def finish(self, index: int, reason: str | None) -> dict[str, Any]:
        state = self.states[index]
        state.finish_reason = reason
        final = finish_choice(self.frontend.tokenizer, state, self.stop, self.parse_tools)
        delta: dict[str, Any] = {}
        if final["finish_reason"] == "tool_calls":
            delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(final["message"]["tool_calls"])]
        else:
            rest = self.texts[index].rest(state.token_ids)
            if rest:
                delta["content"] = rest
        return chunk_object(
            self.request_id,
            self.model,
            self.created,
            [
                {
                    "index": index,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": final["finish_reason"],
                    "token_ids": [],
                    **({"stop_reason": final["stop_reason"]} if "stop_reason" in final else {}),
                }
            ],
        )

    def usage(self, prompt: list[int]) -> dict[str, Any] | None:
        """The usage chunk, when the request asked for it (`stream_options.include_usage`)."""
        if not (self.body.get("stream_options") or {}).get("include_usage"):
            return None
        completion_tokens = sum(len(s.token_ids) for s in self.states)
        return chunk_object(
            self.request_id,
            self.model,
            self.created,
            [],
            usage={
                "prompt_tokens": len(prompt),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt) + completion_tokens,
            },
        )
