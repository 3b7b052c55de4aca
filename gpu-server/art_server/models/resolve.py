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

from . import packaged
from .builtin import builtin_names, builtin_path, is_builtin
from .packaged import PACKAGED_MODELS, PackagedModelMissing, converted_path, missing_package_message

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
            return (
                f"the packaged GGUF of {self.source['distribution']} {self.source.get('version') or ''} "
                f"({self.source.get('quantization')}, dequantized to float; converted folder {self.path})"
            )
        return f"{kind} {self.path}"


def locate_base_model(name: str) -> str:
    """Where `name` would load from (`builtin`, `folder`, `hf-cache`, `packaged-gguf`), checked without
    building or converting anything: the server's start-up check. Raises ModelNotFound."""
    if is_builtin(name):
        if name not in builtin_names():
            raise ModelNotFound(
                f"unknown built-in model {name!r}{did_you_mean(name)}; built-in models: {', '.join(builtin_names())}"
            )
        return "builtin"
    folder = existing_folder(name)
    if folder is not None:
        if not (folder / "config.json").is_file():
            raise ModelNotFound(f"base model folder {name[:200]!r} holds no config.json: it is not a Hugging Face model folder")
        return "folder"
    if _hf_cache(name) is not None:
        return "hf-cache"
    if name in PACKAGED_MODELS:
        if packaged.packaged_parts(PACKAGED_MODELS[name]) is None:
            raise ModelNotFound(missing_package_message(PACKAGED_MODELS[name]))
        return "packaged-gguf"
    suggestion = did_you_mean(name)
    if suggestion:
        raise ModelNotFound(f"base model {name[:200]!r} not found{suggestion}")
    raise ModelNotFound(
        f"base model {name[:200]!r} is neither a built-in model ({', '.join(builtin_names())}), a local folder, in the local "
        f"Hugging Face cache, nor a packaged model ({', '.join(PACKAGED_MODELS)}); the server never downloads: fetch it "
        f"first (e.g. `huggingface-cli download {name}`) or pass a folder"
    )


def resolve_base_model(name: str, data_dir: Path, cache_dir: Path | None = None) -> ResolvedModel:
    """The folder to load `name` from and where it came from. `cache_dir` holds converted GGUFs
    (default `<data_dir>/models`)."""
    kind = locate_base_model(name)
    if kind == "builtin":
        return ResolvedModel(builtin_path(name, data_dir), {"kind": "builtin"})
    if kind == "folder":
        return ResolvedModel(Path(name).expanduser().resolve(), {"kind": "folder"})
    if kind == "hf-cache":
        return ResolvedModel(_hf_cache(name), {"kind": "hf-cache"})  # type: ignore[arg-type]
    try:
        path, source = converted_path(name, cache_dir or data_dir / "models")
    except PackagedModelMissing as error:
        raise ModelNotFound(str(error)) from None
    return ResolvedModel(path, source)


def existing_folder(name: str) -> Path | None:
    """`name` as an existing folder, or None (also for names no file system takes: too long, NUL)."""
    try:
        path = Path(name).expanduser()
        return path if path.is_dir() else None
    except (OSError, ValueError, RuntimeError):
        return None


def _hf_cache(name: str) -> Path | None:
    if name.count("/") != 1:
        return None
    try:
        from huggingface_hub import snapshot_download

        path = Path(snapshot_download(name, local_files_only=True))
    except Exception:
        return None
    return path if (path / "config.json").exists() else None


def did_you_mean(name: str, known: list[str] | None = None, cutoff: float = 0.6) -> str:
    """ ": did you mean 'x'?" for the nearest of `known` (default: the built-in and packaged models), or ""."""
    choices = known if known is not None else [*builtin_names(), *PACKAGED_MODELS]
    close = difflib.get_close_matches(name, choices, n=1, cutoff=cutoff)
    return f": did you mean {close[0]!r}?" if close else ""
