"""Structured output (`response_format`): a JSON schema, or any JSON object, enforced while the
model samples, so that even a 135M model writes output of the asked shape.

lm-format-enforcer (one of vLLM's structured-output backends; pure Python) walks the schema one
character at a time and says which tokens may come next; the hf engine masks every other token
before sampling (engine/hf/scheduler.py). The vllm engine hands `response_format` to vLLM, which
enforces it itself.

A constrained choice's logprobs are those of the constrained distribution it was drawn from. The
trainer scores the unconstrained model, so constrained calls are for generation (tasks, judges),
not for rollouts to train on.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from lmformatenforcer import CharacterLevelParserConfig, JsonSchemaParser, TokenEnforcer, TokenEnforcerTokenizerData

# A run of whitespace longer than this is refused: a small model would otherwise pad JSON with
# newlines up to max_tokens (whitespace is always valid between JSON tokens).
MAX_WHITESPACE = 4


class StructuredOutputError(ValueError):
    """`response_format` asks for something that cannot be enforced (a 400 for the caller)."""


def requested_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a request's `response_format` asks for (`{"type": "object"}` for `json_object`),
    or None when the output is free text (no `response_format`, or `text`)."""
    fmt = body.get("response_format")
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt["type"] == "json_object":
        return {"type": "object"}
    return fmt["json_schema"]["schema"]


def check_schema(schema: dict[str, Any]) -> None:
    """Raises StructuredOutputError for a schema the enforcer cannot follow; run before any sampling."""
    try:
        JsonSchemaParser(schema, _config())
    except Exception as error:  # pydantic errors, unknown types, bad $refs, recursion
        message = str(error).splitlines()[0][:300]
        raise StructuredOutputError(f"response_format's JSON schema cannot be enforced: {message}") from None


def _config() -> CharacterLevelParserConfig:
    return CharacterLevelParserConfig(max_consecutive_whitespaces=MAX_WHITESPACE)


class TokenConstraints:
    """Turns schemas into per-sequence token constraints for one tokenizer. The tokenizer's table
    (every token's text) is built once, on the first constrained request: about 1 s for SmolLM2's
    49k tokens, 7 s for Gemma 3's 262k."""

    def __init__(self, tokenizer: Any, eos_token_ids: list[int]):
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self._data: TokenEnforcerTokenizerData | None = None
        self._lock = threading.Lock()

    def _tokenizer_data(self) -> TokenEnforcerTokenizerData:
        with self._lock:
            if self._data is None:
                self._data = _tokenizer_data(self.tokenizer, self.eos_token_ids)
            return self._data

    def constraint(self, schema: dict[str, Any], prompt: list[int]) -> Callable[[list[int]], list[int]]:
        """A function from the tokens generated so far to the token ids allowed next. Build it in a
        worker thread: the first call builds the tokenizer's table."""
        enforcer = TokenEnforcer(self._tokenizer_data(), JsonSchemaParser(schema, _config()))
        prefix = list(prompt)

        def allowed(generated: list[int]) -> list[int]:
            tokens = enforcer.get_allowed_tokens(prefix + generated).allowed_tokens  # a list: use_bitmask is off
            assert isinstance(tokens, list)
            return tokens if tokens else list(self.eos_token_ids)  # nothing can follow: end the output

        return allowed


# Tokens left out of structured output:
# - those holding a character JSON forbids raw inside a string: lm-format-enforcer checks only tokens
#   with quotes, backslashes or line breaks, and a tab or \x1c sampled inside a string made the output
#   unparseable;
# - pieces of a character (byte tokens that decode to U+FFFD alone): the enforcer reads text, and an
#   emoji spelled in byte tokens put it out of step with the output (1 reply in 24 broke so). A
#   character the vocabulary holds only in pieces cannot be written.
_EXCLUDED = re.compile("[\x00-\x09\x0b\x0c\x0e-\x1f\x7f\ufffd]")


def _tokenizer_data(tokenizer: Any, eos_token_ids: list[int]) -> TokenEnforcerTokenizerData:
    """Each regular token's text as it reads inside a word: decoded after a "0" token, so that a
    leading space (SentencePiece's ▁, byte-level BPE's Ġ) shows, and whether it starts a word."""
    special = set(tokenizer.all_special_ids)
    zero = tokenizer.encode("0", add_special_tokens=False)[-1]
    ids = [i for i in range(len(tokenizer)) if i not in special]
    after_zero = tokenizer.batch_decode([[zero, i] for i in ids])
    alone = tokenizer.batch_decode([[i] for i in ids])
    regular = [(i, a[1:], len(a) - 1 > len(b)) for i, a, b in zip(ids, after_zero, alone) if not _EXCLUDED.search(a)]

    def decode(tokens: list[int]) -> str:
        return tokenizer.decode(tokens).rstrip("\ufffd")  # an incomplete UTF-8 sequence is not text yet

    return TokenEnforcerTokenizerData(regular, decode, eos_token_ids, False, len(tokenizer))
