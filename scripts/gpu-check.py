#!/usr/bin/env python3
"""The GPU path in one run, for a machine that has PyTorch, transformers and peft but nothing else
of this project (no Node, no internet, no model files): a randomly initialised model of a real
shape (default Qwen2.5-1.5B's) in bf16, served by the hf engine's scheduler at several
concurrencies, then one GRPO step on LoRA. It prints generated tokens/s next to the bound the
device's memory bandwidth puts on decoding (every decode step reads all weights once), and writes
the raw numbers as JSON.

    python scripts/gpu-check.py                              # CUDA, Qwen2.5-1.5B shape
    python scripts/gpu-check.py --device cpu --shape tiny    # the same code path on a CPU, in seconds

Only torch, transformers and peft are imported (the engine's runner and scheduler and the trainer
are plain torch); `--out` (default $OUT or .artifacts/gpu-check) receives gpu-check.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "gpu-server"))

# Model shapes: (hidden, layers, heads, kv heads, intermediate, vocab, tied embeddings).
SHAPES = {
    "qwen2.5-1.5b": (1536, 28, 12, 2, 8960, 151936, True),
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, 151936, True),
    "smollm2-135m": (576, 30, 9, 3, 1536, 49152, True),
    "tiny": (64, 2, 4, 2, 256, 1024, True),
}


def build_model(shape: str, device: torch.device, dtype: torch.dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, layers, heads, kv, inter, vocab, tied = SHAPES[shape]
    config = Qwen2Config(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        max_position_embeddings=4096,
        initializer_range=0.02,
        torch_dtype=str(dtype).removeprefix("torch."),
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype)
    return model.eval()


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def measured_bandwidth(device: torch.device) -> float:
    """Bytes/s of a large device-to-device copy (read + write), the practical ceiling for decoding."""
    n = (1 << 28) if device.type == "cuda" else (1 << 25)  # 1 GiB of fp32 on CUDA, 128 MiB on CPU
    a = torch.empty(n, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    for _ in range(2):
        b.copy_(a)
    sync(device)
    started = time.perf_counter()
    repeats = 10
    for _ in range(repeats):
        b.copy_(a)
    sync(device)
    return 2 * a.numel() * 4 * repeats / (time.perf_counter() - started)


def spec_bandwidth(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    clock, bus = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    return 2 * clock * 1e3 * bus / 8 if clock and bus else None  # DDR: two transfers a clock


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def serve(scheduler, vocab: int, concurrency: int, prompt_tokens: int, new_tokens: int) -> dict:
    """`concurrency` sequences at once through the engine's continuous-batching scheduler."""
    from art_server.engine.hf.sampling import RowParams
    from art_server.engine.hf.scheduler import FinishEvent, Sequence

    rng = random.Random(concurrency)
    done = threading.Semaphore(0)
    finished: list[str] = []

    def emit(event):
        if isinstance(event, FinishEvent) or not hasattr(event, "token_id"):
            finished.append(getattr(event, "reason", "error"))
            done.release()

    seqs = [
        Sequence(
            f"r{i}",
            0,
            None,
            [rng.randrange(vocab) for _ in range(prompt_tokens)],
            new_tokens,
            RowParams(temperature=1.0),
            emit,
            stream=False,
        )
        for i in range(concurrency)
    ]
    steps_before = scheduler.steps
    started = time.perf_counter()
    scheduler.submit(seqs)
    for _ in seqs:
        done.acquire()
    seconds = time.perf_counter() - started
    tokens = sum(len(s.generated) for s in seqs)
    return {
        "concurrency": concurrency,
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "engine_steps": scheduler.steps - steps_before,
        "finish": sorted(set(finished)),
    }


def grpo_step(runner, lock, vocab: int, groups: int, size: int, prompt_tokens: int, new_tokens: int, device) -> dict:
    from peft import LoraConfig

    from art_server.trainer.grpo import train_step
    from art_server.trainer.grpo_config import GRPOConfig
    from art_server.trainer.grpo_prepare import prepare
    from art_server.trainer.lora import LoraHost

    host = LoraHost(runner, lock)
    host.add_slot(
        "check",
        LoraConfig(
            r=8,
            lora_alpha=16,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            task_type="CAUSAL_LM",
        ),
    )
    optimizer = torch.optim.AdamW(host.parameters("check"), lr=1e-5)
    rng = random.Random(0)
    batch = []
    for _ in range(groups):
        prompt = [rng.randrange(vocab) for _ in range(prompt_tokens)]
        batch.append(
            [
                {
                    "reward": rng.random(),
                    "messages_and_choices": [
                        {
                            "kind": "choice",
                            "prompt_token_ids": prompt,
                            "token_ids": [rng.randrange(vocab) for _ in range(new_tokens)],
                            "logprobs": [-5.0] * new_tokens,
                        }
                    ],
                }
                for _ in range(size)
            ]
        )
    config = GRPOConfig(learning_rate=1e-5)
    timings = []
    for _ in range(3):  # the first warms up
        started = time.perf_counter()
        result = train_step(host, "check", optimizer, prepare(batch, config, 1 << 20), config, 0)
        sync(device)
        timings.append(time.perf_counter() - started)
    step_s = min(timings[1:])
    finite = all(torch.isfinite(p).all() for p in host.parameters("check"))
    return {
        "groups": groups,
        "size": size,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": new_tokens,
        "step_s": step_s,
        "tokens_trained": result["tokens_trained"],
        "trained_tokens_per_s": result["tokens_trained"] / step_s,
        "loss": result["loss"],
        "grad_norm": result["grad_norm"],
        "weights_finite": bool(finite),
        "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--concurrency", default="1,32,128")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / ".artifacts" / "gpu-check"))
    a = p.parse_args()
    from art_server.core.allocator import keep_freed_memory
    from art_server.engine.hf.runner import HFModelRunner
    from art_server.engine.hf.scheduler import BatchScheduler

    keep_freed_memory()
    device = torch.device(a.device)
    dtype = getattr(torch, a.dtype)
    started = time.perf_counter()
    model = build_model(a.shape, device, dtype)
    built_s = time.perf_counter() - started
    vocab = model.config.vocab_size
    size = weight_bytes(model)
    measured, spec = measured_bandwidth(device), spec_bandwidth(device)
    bandwidth = measured
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), torch {torch.__version__}, "
        f"{a.shape} random init in {a.dtype}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, "
        f"{size / 1e9:.2f} GB of weights, built in {built_s:.1f} s"
    )
    print(f"memory bandwidth: measured copy {measured / 1e9:.0f} GB/s" + (f", spec {spec / 1e9:.0f} GB/s" if spec else ""))
    runner = HFModelRunner(model, None, device)
    scheduler = BatchScheduler(
        runner,
        eos_token_ids=set(),
        max_batch_size=512,
        pad_token_id=0,
        threads=None if device.type == "cuda" else max(1, (os.cpu_count() or 2) - 1),
    )
    serving = []
    print("\n| concurrency | generated tokens/s | engine steps | tokens/s bound by bandwidth | share of bound |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for c in [int(x) for x in a.concurrency.split(",")]:
        serve(scheduler, vocab, min(c, 4), a.prompt_tokens, 4)  # warm-up
        r = serve(scheduler, vocab, c, a.prompt_tokens, a.new_tokens)
        bound = c * bandwidth / size  # each decode step reads every weight once and yields c tokens
        r.update(bound_tokens_per_s=bound, share_of_bound=r["tokens_per_s"] / bound)
        serving.append(r)
        print(f"| {c} | {r['tokens_per_s']:.0f} | {r['engine_steps']} | {bound:.0f} | {r['share_of_bound']:.0%} |")
    scheduler.shutdown()
    step = grpo_step(
        runner,
        scheduler.model_lock,
        vocab,
        groups=8,
        size=8,
        prompt_tokens=a.prompt_tokens,
        new_tokens=a.new_tokens,
        device=device,
    )
    print(
        f"\nGRPO step on LoRA r=8: 8 groups x 8 x ({a.prompt_tokens} prompt + {a.new_tokens} completion) tokens in "
        f"{step['step_s']:.2f} s, {step['trained_tokens_per_s']:.0f} trained tokens/s, loss {step['loss']:.4f}, "
        f"grad norm {step['grad_norm']:.3f}, weights finite: {step['weights_finite']}"
        + (f", peak memory {step['peak_memory_gb']:.1f} GB" if step["peak_memory_gb"] else "")
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "args": vars(a),
        "device": str(device),
        "torch": torch.__version__,
        "weight_bytes": size,
        "bandwidth_measured": measured,
        "bandwidth_spec": spec,
        "serving": serving,
        "grpo_step": step,
    }
    if device.type == "cuda":
        report["device_name"] = torch.cuda.get_device_name(device)
    (out / "gpu-check.json").write_text(json.dumps(report, indent=2))
    print(f"raw data: {out / 'gpu-check.json'}")
    if not step["weights_finite"] or any(r["tokens"] != r["concurrency"] * a.new_tokens for r in serving):
        sys.exit(1)


if __name__ == "__main__":
    main()
