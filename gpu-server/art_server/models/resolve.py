"""Where a base model's weights come from. Nothing is downloaded; a name resolves, in order, to:

1. a built-in model (`builtin:tiny`, `builtin:small`), built locally on first use;
2. a local folder;
3. the local Hugging Face cache (a full-precision snapshot a user downloaded before);
4. a packaged GGUF (see packaged.py), converted once into a Hugging Face folder.

The returned `source` says which, for the server log and `/v1/models`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .builtin import builtin_names, builtin_path, is_builtin
from .packaged import PACKAGED_MODELS, PackagedModelMissing, converted_path

DEFAULT_BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


class ModelNotFound(LookupError):
    pass


@dataclass
class ResolvedModel:
    path: Path
    source: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        kind = self.source.get("kind")
        if kind == "packaged-gguf":
            return (f"the packaged GGUF of {self.source['distribution']} {self.source.get('version') or ''} "
                    f"({self.source.get('quantization')}, dequantized to float; converted folder {self.path})")
        return f"{kind} {self.path}"


def resolve_base_model(name: str, data_dir: Path, cache_dir: Path | None = None) -> ResolvedModel:
    """The folder to load `name` from and where it came from. `cache_dir` holds converted GGUFs
    (default `<data_dir>/models`)."""
    if is_builtin(name):
        try:
            return ResolvedModel(builtin_path(name, data_dir), {"kind": "builtin"})
        except KeyError as error:
            raise ModelNotFound(f"{error.args[0]}{_did_you_mean(name)}") from None
    local = Path(name).expanduser()
    if local.is_dir():
        return ResolvedModel(local.resolve(), {"kind": "folder"})
    cached = _hf_cache(name)
    if cached is not None:
        return ResolvedModel(cached, {"kind": "hf-cache"})
    if name in PACKAGED_MODELS:
        try:
            path, source = converted_path(name, cache_dir or data_dir / "models")
        except PackagedModelMissing as error:
            raise ModelNotFound(str(error)) from None
        return ResolvedModel(path, source)
    raise ModelNotFound(
        f"base model {name!r} is neither a built-in model ({', '.join(builtin_names())}), a local folder, in the local "
        f"Hugging Face cache, nor a packaged model ({', '.join(PACKAGED_MODELS)}); the server never downloads: fetch it "
        f"first (e.g. `huggingface-cli download {name}`) or pass a folder{_did_you_mean(name)}")


def _hf_cache(name: str) -> Path | None:
    if name.count("/") != 1:
        return None
    try:
        from huggingface_hub import snapshot_download

        path = Path(snapshot_download(name, local_files_only=True))
    except Exception:
        return None
    return path if (path / "config.json").exists() else None


def _did_you_mean(name: str) -> str:
    known = [*builtin_names(), *PACKAGED_MODELS]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f". Did you mean {close[0]!r}?" if close else ""
