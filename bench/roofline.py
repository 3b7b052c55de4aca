"""Roofline benchmark: how close serving and training come to what this machine can do.

1. The machine's bounds, measured here with torch (this process's threads): read bandwidth (the
   sum of a 512 MB float32 tensor, best of several) and matmul rates (2048x2048, bf16 and fp32).
2. The real server (`python -m art_server`, the hf engine, `--dtype auto`) on the default model, two
   models registered and trained a step (two LoRA adapters loaded), every request naming one:
   decode at concurrency 1, 8 and 32 (interleaved rounds, the median), prefill (one long prompt, a
   new one each time), the GRPO step, and the same SFT step repeated (its spread is the point).
3. Each row as a fraction of its bound, with the accounting (N = the model's parameters, E = the
   tied embedding/head's):
   - decode: 2N FLOP a token; a step reads every weight once, N x (bytes of the serving dtype), for
     all the rows of the batch. Bound = min(matmul rate / 2N, c x read bandwidth / weight bytes).
     (The engine's head is float32, core/head.py: it reads E x 4 bytes where the bound counts E x 2;
     the row "weights read by the engine" prints what that costs.)
   - prefill: 2N FLOP a prompt token, compute bound.
   - grpo: 4N FLOP a token the trainer ran (forward 2N, backward to the activations 2N; LoRA's own
     gradients are negligible), default config (one gradient pass, no reference), compute bound at
     the trainer's dtype.
   - sft: the same 4N a token of the conversations (prompts included), compute bound.
4. With --profile (after the server stops): where one decode step's time goes in the engine (the
   base model without HTTP), by operator group.

    npm run bench:roofline [-- --rounds 3 --max-tokens 64 --sft-repeats 8 --profile]

Raw data: .artifacts/bench/roofline.json (`bounds`, `rows`, `accounting`, `sft_steps`, `profile`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "gpu-server" / "tests"))
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]


def best_of(fn: Any, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def machine_bounds() -> dict[str, Any]:
    x = torch.empty(128 * 2**20, dtype=torch.float32).uniform_()
    read_gbs = x.numel() * 4 / best_of(lambda: x.sum(), 9) / 1e9
    rates = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a, b = torch.randn(2048, 2048).to(dtype), torch.randn(2048, 2048).to(dtype)
        rates[name] = 2 * 2048**3 / best_of(lambda: a @ b, 10) / 1e9
    return {"readGBs": read_gbs, "matmulGflops": rates, "threads": torch.get_num_threads()}


def model_sizes(path: Path) -> dict[str, int]:
    from safetensors import safe_open

    total = embedding = 0
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for key in st.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                count = math.prod(st.get_slice(key).get_shape())
                total += count
                if key.endswith("embed_tokens.weight"):
                    embedding = count
    return {"params": total, "embedding": embedding}


def decode_round(client: Any, pool: ThreadPoolExecutor, model: str, level: int, max_tokens: int, seed: int) -> float:
    """`level` requests at a time, 2 x level in all: generated tokens per second of wall time."""
    from rl import sample

    started = time.perf_counter()
    out = list(pool.map(lambda i: sample(client, model, STORY, 1, max_tokens, seed=seed + i), range(2 * level)))
    tokens = sum(r["usage"]["completion_tokens"] for r in out)
    return tokens / (time.perf_counter() - started)


def prefill_rate(client: Any, model: str, repeats: int) -> float:
    from rl import sample

    rates = []
    for k in range(repeats + 1):
        # A new prompt each time (nothing of it cached), about 400 tokens.
        text = f"Note {k}: " + " ".join(f"item {k}-{i} is on shelf {i % 7}." for i in range(40))
        started = time.perf_counter()
        r = sample(client, model, [{"role": "user", "content": text}], 1, 1, seed=k)
        if k:
            rates.append(r["usage"]["prompt_tokens"] / (time.perf_counter() - started))
    return statistics.median(rates)


def grpo_steps(client: Any, model: str, steps: int) -> list[dict]:
    from rl import board_prompt, choice_item, sample, step

    rows = []
    for s in range(steps + 1):
        groups = []
        for g in range(4):
            messages = board_prompt(f"X . .\n. O .\n. . {g}")
            out = sample(client, model, messages, 8, 16, seed=s * 100 + g)
            groups.append(
                [
                    {
                        "messages_and_choices": [*messages, choice_item(out, ch)],
                        "reward": float("B" in (ch["message"]["content"] or "")),
                    }
                    for ch in out["choices"]
                ]
            )
        metrics = step(client, model, groups, learning_rate=1e-5)[-1]["metrics"]
        if s:  # the first step warms up
            rows.append({"seconds": metrics["forward_backward_s"], "tokens": metrics["trainer_tokens"]})
    return rows


def sft_conversations() -> list[dict]:
    from rl import board_prompt

    cells = ["A1", "B2", "C3", "A3", "C1", "B1", "B3", "A2"]
    return [
        {"messages": [*board_prompt(f"{c} is empty, board {i}"), {"role": "assistant", "content": f"I take {c}."}]}
        for i, c in enumerate(cells * 2)
    ]


def sft_steps(client: Any, model: str, tokenizer: Any, repeats: int) -> tuple[list[dict], int]:
    from rl import step

    conversations = sft_conversations()
    from art_server.chat.prompt import prompt_token_ids

    tokens = sum(len(prompt_token_ids(tokenizer, c["messages"], None, add_generation_prompt=False)) for c in conversations)
    rows = []
    for k in range(repeats + 1):
        metrics = step(client, model, conversations, path="train_sft", learning_rate=1e-5, epochs=1, batch_size=4)[-1]["metrics"]
        if k:
            rows.append({"seconds": metrics["forward_backward_s"], "tokens": tokens})
    return rows, tokens


def profile_decode(path: Path, dtype: str, batch: int) -> dict[str, Any]:
    """One decode step of the engine's runner (base model, a 60-token context), by operator group."""
    from torch.profiler import ProfilerActivity, profile

    from art_server.engine.hf.engine import load_hf_engine
    from art_server.engine.hf.sampling import RowParams, sample

    engine = load_hf_engine(MODEL, path, device="cpu", dtype=dtype)
    engine.scheduler.shutdown()
    runner = engine.runner
    ids = torch.randint(0, 1000, (batch, 60))
    mask = torch.ones_like(ids)
    _, cache = runner.forward(None, ids, mask, torch.arange(60)[None].expand(batch, -1), None)
    token = torch.zeros(batch, 1, dtype=torch.long)

    def one(i: int) -> None:
        nonlocal cache, mask
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
        logits, cache = runner.forward(None, token, mask, torch.full((batch, 1), 60 + i), cache)
        sample(logits[:, -1, :], [RowParams() for _ in range(batch)])

    steps = 10
    for i in range(5):
        one(i)
    started = time.perf_counter()
    for i in range(5, 5 + steps):
        one(i)
    wall = (time.perf_counter() - started) / steps  # without the profiler's own cost
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(5 + steps, 5 + 2 * steps):
            one(i)
    groups = {"matmul (aten::mm/addmm)": 0.0, "attention (SDPA)": 0.0}
    other = 0.0
    for ev in prof.key_averages():
        us = ev.self_cpu_time_total / steps
        if ev.key in ("aten::mm", "aten::addmm", "aten::bmm"):
            groups["matmul (aten::mm/addmm)"] += us
        elif "scaled_dot_product" in ev.key or "flash_attention" in ev.key:
            groups["attention (SDPA)"] += us
        else:
            other += us
    groups["everything else (norms, rotary, cache, LoRA switch, sampling, Python)"] = other
    total = sum(groups.values())
    return {
        "batch": batch,
        "dtype": str(engine.runner.model.dtype),
        "step_ms": wall * 1000,
        "shares": {k: v / total for k, v in groups.items()},
    }


def measure_server(a: argparse.Namespace, path: Path, out_dir: Path, setting: str) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from conftest import start_server

    data = out_dir / f"roofline-data-{os.getpid()}"
    shutil.rmtree(data, ignore_errors=True)
    env = {"ART_OPENMP_DEFAULTS": "1" if setting == "libgomp-defaults" else "0"}
    srv = start_server(data, "--base-model", MODEL, "--log-level", "warning", env=env, timeout=900)
    levels = [int(x) for x in a.levels.split(",")]
    decode: dict[int, list[float]] = {c: [] for c in levels}
    try:
        with srv.client(timeout=900) as client, ThreadPoolExecutor(2 * max(levels)) as pool:
            for name in ("roofline-a", "roofline-b"):
                r = client.post("/v1/art/models/register", json={"name": name, "project": "roofline", "base_model": MODEL})
                assert r.status_code == 200, r.text
            grpo = grpo_steps(client, "roofline-a", a.grpo_steps)
            sft, sft_tokens = sft_steps(client, "roofline-b", AutoTokenizer.from_pretrained(path), a.sft_repeats)
            decode_round(client, pool, "roofline-a", 4, 16, 0)  # warm-up
            for k in range(a.rounds):
                for c in levels:
                    decode[c].append(decode_round(client, pool, "roofline-a", c, a.max_tokens, 1000 * k))
            prefill = prefill_rate(client, "roofline-a", 5)
    finally:
        srv.stop()
        shutil.rmtree(data, ignore_errors=True)
    return {"decode_rounds": decode, "prefill": prefill, "grpo_steps": grpo, "sft_steps": sft, "sft_tokens": sft_tokens}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--levels", default="1,8,32")
    p.add_argument("--grpo-steps", type=int, default=3)
    p.add_argument("--sft-repeats", type=int, default=8)
    p.add_argument("--profile", action="store_true")
    p.add_argument(
        "--openmp",
        default="libgomp-defaults,server",
        help="server runs, in order: libgomp's defaults (ART_OPENMP_DEFAULTS=1), the server's own (core/openmp_waiting.py)",
    )
    a = p.parse_args()
    from art_server.core.allocator import keep_freed_memory
    from art_server.models.resolve import resolve_base_model

    keep_freed_memory()  # as the server does
    out_dir = ROOT / ".artifacts" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = Path(os.environ.get("ART_MODEL_CACHE") or ROOT / ".art" / "models")
    path = resolve_base_model(MODEL, out_dir / "data", cache).path
    bounds = machine_bounds()
    sizes = model_sizes(path)
    print(
        f"bounds: read {bounds['readGBs']:.1f} GB/s, matmul bf16 {bounds['matmulGflops']['bf16']:.0f} / fp32 "
        f"{bounds['matmulGflops']['fp32']:.0f} GFLOP/s ({bounds['threads']} threads)",
        flush=True,
    )

    runs = {}
    for setting in a.openmp.split(","):
        print(f"server with OpenMP waiting: {setting}...", flush=True)
        runs[setting] = measure_server(a, path, out_dir, setting)
    from art_server.engine.device_choice import choose_dtype

    dtype = "bf16" if choose_dtype("auto", torch.device("cpu"), path) == torch.bfloat16 else "fp32"  # what the server chose
    n, e = sizes["params"], sizes["embedding"]
    width = 2 if dtype == "bf16" else 4
    rate = bounds["matmulGflops"][dtype] * 1e9
    weight_bytes = n * width
    engine_bytes = (n - e) * width + e * 4  # the float32 head's copy
    rows = []
    for setting, run in runs.items():

        def row(what: str, concurrency: int | None, measured: float, bound: float) -> None:
            rows.append(
                {
                    "what": what,
                    "dtype": dtype,
                    "concurrency": concurrency,
                    "measured": measured,
                    "unit": "tokens/s",
                    "bound": bound,
                    "fraction": measured / bound,
                    "openmp": setting,
                }
            )

        for c, rounds in run["decode_rounds"].items():
            row("decode", c, statistics.median(rounds), min(rate / (2 * n), c * bounds["readGBs"] * 1e9 / weight_bytes))
        row("prefill", 1, run["prefill"], rate / (2 * n))
        row(
            "grpo",
            None,
            sum(r["tokens"] for r in run["grpo_steps"]) / sum(r["seconds"] for r in run["grpo_steps"]),
            rate / (4 * n),
        )
        row("sft", None, statistics.median(r["tokens"] / r["seconds"] for r in run["sft_steps"]), rate / (4 * n))
    accounting = {
        "params": n,
        "embedding": e,
        "serving_dtype": dtype,
        "flop_per_token_decode": 2 * n,
        "flop_per_token_train": 4 * n,
        "weight_bytes": weight_bytes,
        "engine_bytes_per_step": engine_bytes,
        "engine_bound_c1": bounds["readGBs"] * 1e9 / engine_bytes,
        "sft_tokens_per_step": next(iter(runs.values()))["sft_tokens"],
    }
    report = {"bounds": bounds, "rows": rows, "accounting": accounting, "runs": runs, "config": vars(a), "model": MODEL}
    if a.profile:
        report["profile"] = [profile_decode(path, "auto", b) for b in (1, 32)]
    print_table(report)
    out = out_dir / "roofline.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"raw data: {out.relative_to(ROOT)}")


def print_table(report: dict) -> None:
    b, acc = report["bounds"], report["accounting"]
    print(
        f"\nRoofline: {report['model']}, the real server (one after the other: {', '.join(report['runs'])}), the hf engine in {acc['serving_dtype']} with two LoRA adapters loaded and one "
        f"named by every request; {b['threads']} threads; read {b['readGBs']:.1f} GB/s, matmul bf16 "
        f"{b['matmulGflops']['bf16']:.0f} / fp32 {b['matmulGflops']['fp32']:.0f} GFLOP/s\n"
    )
    print("| what | dtype | concurrency | OpenMP waiting | measured | bound | fraction |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: |")
    for r in sorted(report["rows"], key=lambda r: ["decode", "prefill", "grpo", "sft"].index(r["what"])):
        c = "" if r["concurrency"] is None else str(r["concurrency"])
        print(
            f"| {r['what']} | {r['dtype']} | {c} | {r['openmp']} | {r['measured']:.0f} {r['unit']} | {r['bound']:.0f} | "
            f"{100 * r['fraction']:.0f}% |"
        )
    n = acc["params"]
    print(
        f"\nN = {n / 1e6:.1f}M parameters (E = {acc['embedding'] / 1e6:.1f}M in the tied embedding/head). decode: 2N = "
        f"{2 * n / 1e9:.2f} GFLOP a token, {acc['weight_bytes'] / 1e6:.0f} MB of weights a step for the whole batch; the "
        f"engine's float32 head makes it {acc['engine_bytes_per_step'] / 1e6:.0f} MB (its own c=1 bound "
        f"{acc['engine_bound_c1']:.0f} tokens/s). prefill: 2N a prompt token. grpo, sft: 4N a token run "
        f"(sft: {acc['sft_tokens_per_step']} tokens a step)."
    )
    for setting, run in report["runs"].items():
        sft = [r["seconds"] for r in run["sft_steps"]]
        print(
            f"SFT step ({setting}), {len(sft)} repeats of the same step: "
            + ", ".join(f"{s:.2f}" for s in sft)
            + f" s (min {min(sft):.2f}, max {max(sft):.2f})"
        )
    for prof in report.get("profile", []):
        shares = ", ".join(f"{k} {100 * v:.0f}%" for k, v in prof["shares"].items())
        print(f"decode step profile, batch {prof['batch']} ({prof['dtype']}): {prof['step_ms']:.1f} ms; {shares}")


if __name__ == "__main__":
    main()
