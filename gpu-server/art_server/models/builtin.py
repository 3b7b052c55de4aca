"""Built-in models, built locally in seconds so that the offline default and the tests need no
download: a Qwen2-architecture causal LM with a byte-level BPE tokenizer and a ChatML chat template
with hermes-style tool calls (the format of Qwen2.5 instruct models).

Recipe (see shared stack notes): the tokenizer uses Qwen2's exact pipeline (NFC, Qwen's split
regex, ByteLevel without regex) because `AutoTokenizer` rebuilds a qwen2 tokenizer that way;
`initializer_range` is large (0.2 for the tiny size) because at the usual 0.02 the random policy is
near uniform and GRPO with LoRA learns nothing in a reasonable number of steps.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path

from ..store.atomic import build_dir_once

BUILTIN_PREFIX = "builtin:"
RECIPE_VERSION = 1  # bump when the recipe changes, so cached builds are rebuilt

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Domain strings added whole so the tiny model can emit a move in one token.
DOMAIN_TOKENS = [
    *[f"{row}{col}" for row in "ABC" for col in "123"],
    "left",
    "right",
    "up",
    "down",
    "<move>",
    "</move>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]

# Written for transformers' Jinja settings (trim_blocks: a newline right after a block tag is
# dropped), hence the few {{ '\n' }} expressions.
CHAT_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role == 'assistant' and message.tool_calls %}"
    "<|im_start|>assistant\n{% if message.content %}{{ message.content }}\n{% endif %}"
    "{% for tc in message.tool_calls %}"
    "{% if not loop.first %}{{ '\\n' }}{% endif %}"
    '<tool_call>\n{"name": "{{ tc.function.name }}", "arguments": '
    "{% if tc.function.arguments is string %}{{ tc.function.arguments }}"
    "{% else %}{{ tc.function.arguments | tojson }}{% endif %}}\n</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# A test template that is not append-only, as Qwen3's is (it drops earlier turns' reasoning): each
# assistant turn but the last renders empty, so a later turn's prompt does not extend an earlier
# turn's sampled tokens. builtin:tiny-forgetful uses it to test how such conversations train.
FORGETFUL_TEMPLATE = CHAT_TEMPLATE.replace(
    "{% else %}<|im_start|>{{ message.role }}",
    "{% elif message.role == 'assistant' and not loop.last %}<|im_start|>assistant\n<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}",
)


@dataclass(frozen=True)
class BuiltinSpec:
    """The size of a built-in model: a config, not a framework."""

    name: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    max_position_embeddings: int
    initializer_range: float
    seed: int = 0
    chat_template: str = CHAT_TEMPLATE


TINY = BuiltinSpec(
    "tiny",
    vocab_size=1024,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=256,
    max_position_embeddings=2048,
    initializer_range=0.2,
)

BUILTIN_SPECS: dict[str, BuiltinSpec] = {
    "tiny": TINY,
    # tiny's weights, with a chat template that rewrites history
    "tiny-forgetful": replace(TINY, name="tiny-forgetful", chat_template=FORGETFUL_TEMPLATE),
    "small": BuiltinSpec(
        "small",
        vocab_size=2048,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=768,
        max_position_embeddings=4096,
        initializer_range=0.1,
    ),
}


def is_builtin(name: str) -> bool:
    return name.startswith(BUILTIN_PREFIX)


def builtin_names() -> list[str]:
    return [BUILTIN_PREFIX + size for size in BUILTIN_SPECS]


def _corpus() -> str:
    return resources.files("art_server.models").joinpath("corpus.txt").read_text(encoding="utf8")


def build_tokenizer(spec: BuiltinSpec):
    """Trains a byte-level BPE on the shipped corpus with Qwen2's pipeline; returns a
    transformers `Qwen2Tokenizer` (what `AutoTokenizer` loads back)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    bpe = Tokenizer(
        models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False, byte_fallback=False)
    )
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size - len(SPECIAL_TOKENS) - len(DOMAIN_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus().splitlines(), trainer=trainer)
    vocab_model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in vocab_model["merges"]]
    tokenizer = Qwen2Tokenizer(
        vocab=vocab_model["vocab"],
        merges=merges,  # pyright: ignore[reportArgumentType]  (tuples, as tokenizers gives them)
        unk_token=None,  # pyright: ignore[reportArgumentType]  (Qwen2 has no unk token)
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in DOMAIN_TOKENS])
    tokenizer.chat_template = spec.chat_template
    tokenizer.model_max_length = spec.max_position_embeddings
    return tokenizer


def build_model(spec: BuiltinSpec, vocab_size: int, eos_token_id: int, pad_token_id: int):
    """A randomly initialised Qwen2ForCausalLM with a fixed seed (deterministic weights)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        initializer_range=spec.initializer_range,
        tie_word_embeddings=True,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        bos_token_id=None,
        torch_dtype="float32",  # pyright: ignore[reportCallIssue]  (the saved config's field; its hash keys the built model)
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = pad_token_id
    return model


def builtin_path(name: str, data_dir: Path) -> Path:
    """Builds `builtin:<size>` into `<data_dir>/builtin/<size>-v<recipe>/` once and returns the folder,
    a normal Hugging Face model folder (`from_pretrained` loads it)."""
    size = name[len(BUILTIN_PREFIX) :]
    spec = BUILTIN_SPECS.get(size)
    if spec is None:
        raise KeyError(f"unknown built-in model {name!r}; built-in models: {', '.join(builtin_names())}")

    def build(folder: Path) -> None:
        tokenizer = build_tokenizer(spec)
        eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
        assert isinstance(eos, int) and isinstance(pad, int)  # one token, one id
        model = build_model(spec, len(tokenizer), eos, pad)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / "build.json").write_text(json.dumps({"name": name, "recipe": RECIPE_VERSION, **asdict(spec)}, indent=2))

    return build_dir_once(data_dir / "builtin" / f"{size}-v{RECIPE_VERSION}", "build.json", build)
