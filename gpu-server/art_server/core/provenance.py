"""Provenance of sampled choices: every choice this server returns carries `art_provenance`, a tag
saying which base model and which server sampled it, signed over its prompt ids, token ids and
logprobs with a key only this server (its data dir) holds:

    art1:<base model fingerprint>:<server id>:<signature>

When a step trains on a choice, the rule is:
- another base model (fingerprint differs): refused, 400: its token ids mean other tokens here, and
  its logprobs come from another distribution;
- this server: the signature must match (token ids or logprobs changed since sampling: 400);
- another server of the same base model (e.g. a serving replica, or before a data dir was
  replaced): accepted, with a warning line, its logprobs trusted as sent;
- no tag (a hand-built choice, or a client that drops it): accepted, with a warning line.

The fingerprint is a hash of the base model's JSON files (config, tokenizer, generation config);
the server id and key live in `<data dir>/server-identity.json`, so they survive restarts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

PREFIX = "art1"
# What a choice is stamped with beside its tag: the policy step that sampled it (None: the base
# model) and its sampling parameters as recorded (distribution.SamplingParams.wire).
Stamp = tuple[int | None, dict[str, Any]]


def base_fingerprint(base_path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(base_path.glob("*.json")):
        digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def server_identity(data_dir: Path) -> tuple[str, bytes]:
    """This data dir's server id and signing key, created on first use (readable by this user only)."""
    file = data_dir / "server-identity.json"
    if file.exists():
        stored = json.loads(file.read_text())
        return stored["server_id"], bytes.fromhex(stored["key"])
    server_id, key = secrets.token_hex(8), secrets.token_bytes(32)
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(f".tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"server_id": server_id, "key": key.hex()}, out)
    os.replace(tmp, file)
    return server_id, key


class Provenance:
    def __init__(self, fingerprint: str, server_id: str, key: bytes):
        self.fingerprint = fingerprint
        self.server_id = server_id
        self.key = key

    def _signature(
        self, fingerprint: str, server_id: str, prompt_ids: list[int], token_ids: list[int], logprobs: list[float]
    ) -> str:
        message = f"{fingerprint}:{server_id}:".encode() + orjson.dumps([prompt_ids, token_ids, logprobs])
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()[:32]

    def tag(self, prompt_ids: list[int], token_ids: list[int], logprobs: list[float]) -> str:
        signature = self._signature(self.fingerprint, self.server_id, prompt_ids, token_ids, logprobs)
        return f"{PREFIX}:{self.fingerprint}:{self.server_id}:{signature}"

    def _mark(self, choice: dict[str, Any], prompt: list[int], ids: list[int], logprobs: list[float], stamp: Stamp) -> None:
        # Beside the tag, unsigned (as the policy step): what the trainer needs to score the turn. A
        # client that drops it (or an older one) gets the trainer's one notice, not a refusal.
        policy_step, sampling = stamp
        choice["art_sampling"] = sampling
        choice["art_provenance"] = self.tag(prompt, ids, logprobs)
        if policy_step is not None:
            choice["art_policy_step"] = policy_step

    def tag_completion(self, completion: dict[str, Any], stamp: Stamp) -> None:
        """Tags every choice. The stamp's policy step (the trained model's step that sampled it, None
        for the base model) goes beside the tag as `art_policy_step`, so a trainer can tell how far
        behind it is; its sampling parameters as `art_sampling`."""
        prompt = completion.get("prompt_token_ids") or []
        for choice in completion.get("choices", []):
            entries = (choice.get("logprobs") or {}).get("content") or []
            self._mark(choice, prompt, choice.get("token_ids") or [], [e["logprob"] for e in entries], stamp)

    def stream_tagger(self, stamp: Stamp) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """Tags each choice on the chunk that finishes it, from the ids and logprobs streamed before."""
        prompt: list[int] = []
        ids: dict[int, list[int]] = {}
        logprobs: dict[int, list[float]] = {}

        def tagger(chunk: dict[str, Any]) -> dict[str, Any]:
            nonlocal prompt
            prompt = chunk.get("prompt_token_ids") or prompt
            for choice in chunk.get("choices", []):
                index = choice.get("index", 0)
                ids.setdefault(index, []).extend(choice.get("token_ids") or [])
                logprobs.setdefault(index, []).extend(e["logprob"] for e in ((choice.get("logprobs") or {}).get("content") or []))
                if choice.get("finish_reason") is not None:
                    self._mark(choice, prompt, ids[index], logprobs[index], stamp)
            return chunk

        return tagger

    def check(
        self, tag: str | None, prompt_ids: list[int], token_ids: list[int], logprobs: list[float], where: str
    ) -> str | None:
        """Applies the rule above to one choice: raises ValueError to refuse it, or returns the kind of
        warning it needs ("untagged", "other-server") or None."""
        if tag is None:
            return "untagged"
        parts = tag.split(":")
        if len(parts) != 4 or parts[0] != PREFIX:
            raise ValueError(f"{where}: art_provenance {tag[:80]!r} is not a provenance tag this server wrote")
        _, fingerprint, server_id, signature = parts
        if fingerprint != self.fingerprint:
            raise ValueError(
                f"{where} was sampled from another base model (fingerprint {fingerprint}; this server trains "
                f"{self.fingerprint}): its token ids and logprobs mean nothing for this model. Sample it from this server"
            )
        if server_id != self.server_id:
            return "other-server"
        if not hmac.compare_digest(signature, self._signature(fingerprint, server_id, prompt_ids, token_ids, logprobs)):
            raise ValueError(
                f"{where}: its prompt ids, token ids or logprobs differ from what this server sampled "
                "(art_provenance does not match); send the choice as the server returned it"
            )
        return None


WARNINGS = {
    "untagged": "{n} sampled choice(s) carry no art_provenance tag (built by hand, or a client that drops it): trained on "
    "as sent, trusting their token ids and logprobs",
    "other-server": "{n} sampled choice(s) were sampled by another server of the same base model: trained on, trusting "
    "their logprobs as sent",
}


def check_groups(provenance: Provenance, groups: list[list[dict[str, Any]]]) -> list[str]:
    """Checks every sampled choice of a step's groups; returns the warning lines (ValueError to refuse)."""
    counts: dict[str, int] = {}
    for g, group in enumerate(groups):
        for t, trajectory in enumerate(group):
            for c, item in enumerate(trajectory.get("messages_and_choices", [])):
                if item.get("kind") != "choice" or item.get("token_ids") is None or item.get("logprobs") is None:
                    continue  # nothing to train on (the step counts it under missing_tokens)
                kind = provenance.check(
                    item.get("art_provenance"),
                    item.get("prompt_token_ids") or [],
                    item["token_ids"],
                    item.get("logprobs") or [],
                    f"group {g}, trajectory {t}, item {c}",
                )
                if kind:
                    counts[kind] = counts.get(kind, 0) + 1
    return [WARNINGS[kind].format(n=n) for kind, n in counts.items()]
