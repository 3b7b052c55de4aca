#!/usr/bin/env python3
"""The vllm engine's path in one run, for a GPU machine with this repository, the server's Python
packages (`pip install -e gpu-server`) and vLLM, but no Node, no internet and no model files: a
randomly initialised model of a real shape (default Qwen2.5-1.5B's, with the built-in models'
tokenizer) saved as a model folder, served by the real server with `--engine vllm` (sleep mode on
CUDA), then
- a concurrency sweep of chat requests over HTTP (generated tokens/s, median latency);
- a GRPO step on a group vLLM sampled: the step's time, the LoRA hot-load into vLLM, the first
  answer from the new step, and how far the trainer's logprobs were from vLLM's
  (`sampler_logprob_diff_*`, the importance ratio the loss used and the sampler-correction weight).

    python scripts/gpu-check-vllm.py                                  # CUDA, Qwen2.5-1.5B shape, bf16
    python scripts/gpu-check-vllm.py --shape builtin-small --dtype float32 --concurrency 1,4 --new-tokens 8
                                       # the same path on vLLM's CPU build (.venv-vllm), in about a minute

`--out` (default $OUT or .artifacts/gpu-check) receives gpu-check-vllm.json. Exit 1 when a request
failed or the step did not train.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "gpu-server"))


def gpu_check():
    """scripts/gpu-check.py, for its model shapes and builder (a file name with a dash: no import)."""
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu-check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model_folder(shape: str, dtype: str, folder: Path) -> str:
    """The base model to serve: `builtin:small` as is, or a random model of `shape` with the built-in
    tokenizer (its ids all fall inside the shape's vocabulary)."""
    if shape == "builtin-small":
        return "builtin:small"
    import torch

    from art_server.models.builtin import BUILTIN_SPECS, build_tokenizer

    tokenizer = build_tokenizer(BUILTIN_SPECS["small"])
    model = gpu_check().build_model(shape, torch.device("cpu"), getattr(torch, dtype))
    model.config.eos_token_id = model.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.config.pad_token_id = model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


class Server:
    """`python -m art_server` with the given flags; ready when it prints its JSON line."""

    def __init__(self, data_dir: Path, args: list[str], timeout: float):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "art_server", "--data-dir", str(data_dir), "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT / "gpu-server",
        )
        self.log: list[str] = []
        threading.Thread(target=lambda: self.log.extend(self.process.stderr), daemon=True).start()
        ready: dict = {}
        reader = threading.Thread(
            target=lambda: ready.update(next((json.loads(line) for line in self.process.stdout if line.startswith("{")), {})),
            daemon=True,
        )
        reader.start()
        reader.join(timeout)
        if not ready:
            self.process.kill()
            sys.exit("the server did not start:\n" + "".join(self.log[-30:]))
        self.client = httpx.Client(base_url=ready["url"], headers={"Authorization": f"Bearer {ready['token']}"}, timeout=1800)

    def stop(self) -> None:
        self.client.close()
        self.process.terminate()
        self.process.wait(60)


def chat(client: httpx.Client, model: str, max_tokens: int, seed: int, n: int = 1) -> tuple[dict, float]:
    started = time.perf_counter()
    r = client.post(
        "/v1/chat/completions",
        json={
            "model": model,
            "n": n,
            "max_tokens": max_tokens,
            "temperature": 1.0,
            "seed": seed,
            "messages": [{"role": "user", "content": f"Tell me a story about the number {seed}."}],
        },
    )
    r.raise_for_status()
    return r.json(), time.perf_counter() - started


def sweep(client: httpx.Client, model: str, concurrency: int, new_tokens: int) -> dict:
    requests = max(2 * concurrency, 8)
    chat(client, model, 4, 0)  # warm-up
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        answers = list(pool.map(lambda i: chat(client, model, new_tokens, 1000 + i), range(requests)))
    seconds = time.perf_counter() - started
    tokens = sum(body["usage"]["completion_tokens"] for body, _ in answers)
    return {
        "concurrency": concurrency,
        "requests": requests,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "median_latency_s": statistics.median(s for _, s in answers),
    }


def grpo_step(server: Server, base: str, new_tokens: int) -> dict:
    c = server.client
    c.post("/v1/art/models/register", json={"name": "check", "project": "gpu-check", "base_model": base}).raise_for_status()
    body, sample_s = chat(c, "check", new_tokens, 7, n=8)
    messages = [{"role": "user", "content": "Tell me a story about the number 7."}]
    group = [
        {
            "messages_and_choices": [
                *messages,
                {
                    "kind": "choice",
                    "message": ch["message"],
                    "prompt_token_ids": body["prompt_token_ids"],
                    "token_ids": ch["token_ids"],
                    "logprobs": [e["logprob"] for e in ch["logprobs"]["content"]],
                    "finish_reason": ch["finish_reason"],
                    "art_provenance": ch["art_provenance"],
                },
            ],
            "reward": i / 7,
        }
        for i, ch in enumerate(body["choices"])
    ]
    started = time.perf_counter()
    with c.stream("POST", "/v1/art/models/check/train", json={"groups": [group], "config": {"learning_rate": 1e-5}}) as r:
        r.raise_for_status()
        lines = [json.loads(line) for line in r.iter_lines() if line.strip()]
    step_s = time.perf_counter() - started
    result = lines[-1]
    if result.get("type") != "result":
        sys.exit(f"the GRPO step failed: {result}")
    _, first_answer_s = chat(c, "check@1", 1, 0)
    m = result["metrics"]
    return {
        "sample_group_s": sample_s,
        "step_s": step_s,
        "first_answer_from_new_step_s": first_answer_s,
        "step": result["step"],
        **{
            k: m.get(k)
            for k in (
                "tokens_trained",
                "forward_backward_s",
                "save_s",
                "reload_s",
                "sleep_s",
                "wake_s",
                "loss",
                "grad_norm",
                "sampler_logprob_diff_mean",
                "sampler_logprob_diff_max",
                "importance_ratio_mean",
                "importance_ratio_max",
                "sampler_weight_mean",
            )
        },
    }


def main() -> None:
    shapes = sorted(gpu_check().SHAPES) + ["builtin-small"]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="qwen2.5-1.5b", choices=shapes)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--concurrency", default="1,32,128")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--vllm-command", default="auto", help="as the server's --vllm-command")
    p.add_argument("--vllm-args", default="", help="as the server's --vllm-args (--vllm-args='--max-num-seqs 64')")
    p.add_argument("--startup-timeout", type=float, default=1800)
    p.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / ".artifacts" / "gpu-check"))
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpu-check-vllm-"))
    started = time.perf_counter()
    base = model_folder(a.shape, a.dtype, work / "model")
    built_s = time.perf_counter() - started
    started = time.perf_counter()
    server = Server(
        work / "data",
        [
            "--engine",
            "vllm",
            "--base-model",
            base,
            "--dtype",
            a.dtype,
            "--vllm-command",
            a.vllm_command,
            f"--vllm-args={a.vllm_args}",
            "--vllm-startup-timeout",
            str(a.startup_timeout),
        ],
        a.startup_timeout + 60,
    )
    startup_s = time.perf_counter() - started
    try:
        stats = server.client.get("/v1/engine/stats").json()
        served = server.client.get("/v1/models").json()["data"][0]["id"]
        print(
            f"vLLM serving {a.shape} ({a.dtype}) on {stats['device']}: model ready in {built_s:.1f} s, server + vLLM up in {startup_s:.1f} s"
        )
        print("\n| concurrency | requests | generated tokens/s | median latency |\n| ---: | ---: | ---: | ---: |")
        serving = []
        for conc in [int(x) for x in a.concurrency.split(",")]:
            serving.append(sweep(server.client, served, conc, a.new_tokens))
            r = serving[-1]
            print(f"| {conc} | {r['requests']} | {r['tokens_per_s']:.0f} | {r['median_latency_s']:.2f} s |", flush=True)
        step = grpo_step(server, base, a.new_tokens)
        print(
            f"\nGRPO step on 8 answers vLLM sampled: {step['step_s']:.2f} s (forward/backward {step['forward_backward_s']:.2f} s, "
            f"save {step['save_s']:.2f} s, hot-load into vLLM {step['reload_s']:.2f} s"
            + (f", sleep {step['sleep_s']:.2f} s, wake {step['wake_s']:.2f} s" if step.get("sleep_s") is not None else "")
            + f"); first answer from step 1 in {step['first_answer_from_new_step_s']:.2f} s"
        )
        print(
            f"trainer vs vLLM logprobs: mean |diff| {step['sampler_logprob_diff_mean']:.2e}, max {step['sampler_logprob_diff_max']:.2e}; "
            f"ratio in the loss mean {step['importance_ratio_mean']:.6f}, max {step['importance_ratio_max']:.6f}; "
            f"sampler-correction weight mean {step['sampler_weight_mean']:.4f}"
        )
    finally:
        server.stop()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "args": vars(a),
        "engine_stats": stats,
        "model_build_s": built_s,
        "startup_s": startup_s,
        "serving": serving,
        "grpo_step": step,
    }
    (out / "gpu-check-vllm.json").write_text(json.dumps(report, indent=2))
    print(f"raw data: {out / 'gpu-check-vllm.json'}")
    if not step["tokens_trained"] or any(r["tokens"] == 0 for r in serving):
        sys.exit(1)


if __name__ == "__main__":
    main()
