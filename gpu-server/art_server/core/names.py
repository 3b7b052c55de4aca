"""Names clients use for models: the base model by its own name, adapters as `name@step`
(a bare `name` means its latest step). Project and model names are validated here too."""

from __future__ import annotations

import re

# fullmatch, never match + `$`: `$` also matches before a final newline, which let `name\n` through.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
STEP_RE = re.compile(r"[0-9]{1,9}")
# The same rules as JSON Schema patterns (ECMA-262, where `$` is the end of the string), for the
# published contract: a name, and an adapter's `name@step`.
NAME_PATTERN = r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
ADAPTER_PATTERN = NAME_PATTERN.removesuffix("$") + r"@[0-9]{1,9}$"
# What the server keeps at the top of its data dir beside the projects (cli.py, core/provenance.py,
# builtin.py, resolve.py, the vllm engine's logs): a project of one of these names would collide.
RESERVED_PROJECTS = frozenset({"server.json", "server.lock", "server-identity.json", "builtin", "models", "logs"})


class NameError_(ValueError):
    pass


def check_name(kind: str, name: str) -> str:
    if not NAME_RE.fullmatch(name) or ".." in name:
        raise NameError_(
            f"invalid {kind} name {name[:80]!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit (no '/', no '..', no whitespace)"
        )
    if kind == "project" and name in RESERVED_PROJECTS:
        raise NameError_(
            f"project name {name!r} is reserved: the server keeps a file or folder of that name in its data dir; "
            "pick another project name"
        )
    return name


def split_adapter_name(model: str) -> tuple[str, int | None]:
    """`agent@3` -> ("agent", 3); `agent` -> ("agent", None)."""
    if "@" in model:
        name, _, step = model.rpartition("@")
        # ASCII digits only: str.isdigit() also takes '²', which int() refuses; 9 digits bound it.
        if not STEP_RE.fullmatch(step):
            raise NameError_(f"invalid model name {model[:80]!r}: the part after '@' must be a step number (0-999999999)")
        return name, int(step)
    return model, None


def adapter_key(name: str, step: int) -> str:
    return f"{name}@{step}"
