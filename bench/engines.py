"""The two engines side by side in one run: the hf engine and vLLM (its CPU build from .venv-vllm,
or its CUDA build), on the default base model, through the real server over HTTP.

For each engine (and dtype) it starts a server, registers a model, and runs cookbook-shaped steps:
one group of 8 tic-tac-toe answers of 6 tokens sampled on the model's current LoRA step, then a GRPO
step on it (trained, saved, hot-loaded). It prints the server's start-up time, the median sampling
and step times, and how far the trainer's logprobs were from the sampler's (the step's
`sampler_logprob_diff_mean` / `_max`) and the mean weight the default sampler correction gave the
tokens (`sampler_weight_mean`: 1 where the trainer agrees with the sampler), and writes the raw data.

    npm run bench:engines [-- --dtypes float32,bfloat16 --steps 4 --vllm-max-lora-rank 8]

Raw data: .artifacts/bench/engines.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "gpu-server" / "tests"))

from conftest import start_server  # noqa: E402
from rl import board_prompt, choice_item, sample, step  # noqa: E402

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
BOARDS = [". X .\n. . O\n. . .", "X . .\n. O .\n. . X", ". . .\n. X .\nO . .", "O X .\n. . .\n. . X"]


def run(engine: str, dtype: str, steps: int, extra: list[str]) -> dict:
    started = time.perf_counter()
    srv = start_server(Path(tempfile.mkdtemp()), "--engine", engine, "--base-model", MODEL, "--dtype", dtype, *extra, timeout=900)
    startup = time.perf_counter() - started
    rows = []
    try:
        with srv.client(timeout=900) as c:
            c.post(
                "/v1/art/models/register", json={"name": "bench", "project": "engines", "base_model": MODEL}
            ).raise_for_status()
            for s in range(steps):
                messages = board_prompt(BOARDS[s % len(BOARDS)])
                t0 = time.perf_counter()
                out = sample(c, "bench", messages, 8, 6, seed=s)
                t1 = time.perf_counter()
                group = [
                    {"messages_and_choices": [*messages, choice_item(out, ch)], "reward": float(i % 2)}
                    for i, ch in enumerate(out["choices"])
                ]
                metrics = step(c, "bench", [group], learning_rate=5e-4)[-1]["metrics"]
                rows.append(
                    {
                        "sample_s": t1 - t0,
                        "step_s": time.perf_counter() - t1,
                        "diff_mean": metrics.get("sampler_logprob_diff_mean"),
                        "diff_max": metrics.get("sampler_logprob_diff_max"),
                        "weight_mean": metrics.get("sampler_weight_mean"),
                        "forward_backward_s": metrics.get("forward_backward_s"),
                        "reload_s": metrics.get("reload_s"),
                    }
                )
    finally:
        srv.stop()
    median = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
    return {
        "engine": engine,
        "dtype": dtype,
        "startup_s": startup,
        "sample_s": median("sample_s"),
        "step_s": median("step_s"),
        "diff_mean": median("diff_mean"),
        "diff_max": max(r["diff_max"] for r in rows),
        "weight_mean": median("weight_mean"),
        "steps": rows,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engines", default="hf,vllm")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--vllm-max-lora-rank", type=int, default=0, help="0: the server's default (8 on a CPU)")
    a = p.parse_args()
    results = []
    for dtype in a.dtypes.split(","):
        for engine in a.engines.split(","):
            extra = ["--vllm-max-lora-rank", str(a.vllm_max_lora_rank)] if engine == "vllm" and a.vllm_max_lora_rank else []
            results.append(run(engine, dtype, a.steps, extra))
            r = results[-1]
            print(
                f"{engine:5} {dtype:8}: start {r['startup_s']:.1f} s, sample {r['sample_s']:.2f} s, step {r['step_s']:.2f} s, "
                f"logprob diff mean {r['diff_mean']:.1e} max {r['diff_max']:.1e}, tis weight {r['weight_mean']:.3f}",
                flush=True,
            )
    print(
        "\n| engine | dtype | server start | sample 8 x 6 tokens (median) | GRPO step (median) | trainer vs sampler: mean / max abs diff | tis weight (mean) |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(
            f"| {r['engine']} | {r['dtype']} | {r['startup_s']:.1f} s | {r['sample_s']:.2f} s | {r['step_s']:.2f} s | "
            f"{r['diff_mean']:.1e} / {r['diff_max']:.1e} | {r['weight_mean']:.3f} |"
        )
    out = ROOT / ".artifacts" / "bench" / "engines.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nraw data: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
