"""The built-in models: built locally, deterministic, loadable with plain transformers."""

from __future__ import annotations

import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from art_server.models.builtin import BUILTIN_SPECS, build_tokenizer, builtin_path

pytestmark = pytest.mark.fast  # no server process (docs/development.md#tiers)

SAMPLES = [
    "Hello <move>B2</move> world, café 123\n\n  x",
    '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>',
    "left right up down A1 C3",
    "émoji 🙂 and tabs\t",
]


def test_tiny_builds_in_seconds_and_loads_with_auto_classes(tmp_path):
    started = time.perf_counter()
    path = builtin_path("builtin:tiny", tmp_path)
    assert time.perf_counter() - started < 30
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "qwen2" and model.config.tie_word_embeddings
    assert sum(p.numel() for p in model.parameters()) < 300_000
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert builtin_path("builtin:tiny", tmp_path) == path  # cached


def test_the_saved_tokenizer_encodes_exactly_like_the_trained_one(tmp_path):
    """AutoTokenizer rebuilds a qwen2 tokenizer from vocab and merges; the pipeline must match."""
    path = builtin_path("builtin:tiny", tmp_path)
    loaded = AutoTokenizer.from_pretrained(path)
    trained = build_tokenizer(BUILTIN_SPECS["tiny"])
    for text in SAMPLES:
        assert loaded.encode(text) == trained.encode(text)
        assert loaded.decode(loaded.encode(text)) == text


def test_domain_tokens_are_single_tokens(tiny_path):
    tok = AutoTokenizer.from_pretrained(tiny_path)
    for word in ["A1", "B2", "C3", "left", "down", "<move>", "</move>", "<tool_call>"]:
        assert len(tok.encode(word)) == 1, word


def test_builds_are_deterministic(tmp_path):
    a = AutoModelForCausalLM.from_pretrained(builtin_path("builtin:tiny", tmp_path / "a"))
    b = AutoModelForCausalLM.from_pretrained(builtin_path("builtin:tiny", tmp_path / "b"))
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa, pb), name


def test_the_random_policy_is_far_from_uniform(tiny_path):
    """initializer_range 0.2: a near-uniform policy would give GRPO nothing to sharpen."""
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    tok = AutoTokenizer.from_pretrained(tiny_path)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Name an empty cell."}], add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
    entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum().item()
    assert entropy < 0.9 * torch.log(torch.tensor(float(len(tok)))).item()


@pytest.mark.parametrize("size", ["small"])
def test_bigger_builtin_sizes_build(tmp_path, size):
    path = builtin_path(f"builtin:{size}", tmp_path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert sum(p.numel() for p in model.parameters()) > 1_000_000


def test_chat_template_renders_tools_calls_and_results(tiny_path):
    tok = AutoTokenizer.from_pretrained(tiny_path)
    text = tok.apply_chat_template(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}],
            },
            {"role": "tool", "content": "R"},
        ],
        tools=[{"type": "function", "function": {"name": "f"}}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text.startswith("<|im_start|>system\nS\n\n# Tools")
    assert '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call><|im_end|>\n' in text
    assert "<|im_start|>user\n<tool_response>\nR\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
