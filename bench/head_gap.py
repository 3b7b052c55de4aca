"""How much of the bf16 trainer/sampler gap the output head makes: the default model in bf16, the
same token ids run two ways, as the sampler runs them (a prefill, then one token at a time with a KV
cache) and as the trainer does (one full pass), with the head in bf16 (how both ran it before) and in
float32 (core/head.py, how both run it now). Prints the mean |logprob difference| per token both ways,
then what the float32 head costs in decoding: tokens/s of a decode step (body and head, with a KV
cache, 1 and 32 rows) with each head, in interleaved rounds. Writes the raw numbers.

    .venv/bin/python bench/head_gap.py [--rows 4 --tokens 40 --seed 0]

Raw data: .artifacts/bench/head-gap.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "gpu-server"))

from art_server.core.head import float32_logits  # noqa: E402
from art_server.models.resolve import DEFAULT_BASE_MODEL, resolve_base_model  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--tokens", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    from transformers import AutoModelForCausalLM, DynamicCache

    cache_dir = ROOT / ".art" / "models"
    path = resolve_base_model(DEFAULT_BASE_MODEL, cache_dir, cache_dir).path
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16).eval()
    body, head = model.model, model.lm_head
    torch.manual_seed(args.seed)
    ids = torch.randint(0, head.weight.shape[0], (args.rows, args.tokens))
    half = args.tokens // 2
    with torch.no_grad():
        full = body(input_ids=ids).last_hidden_state
        out = body(input_ids=ids[:, :half], past_key_values=DynamicCache(), use_cache=True)
        steps = [out.last_hidden_state]
        for t in range(half, args.tokens):
            out = body(input_ids=ids[:, t : t + 1], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.last_hidden_state)
        incremental = torch.cat(steps, 1)
        targets = ids[:, half + 1 :]
        result = {}
        for name, logits in (("bf16 head", lambda h: head(h).float()), ("float32 head", lambda h: float32_logits(head, h))):
            a = torch.log_softmax(logits(full[:, half:-1]), -1).gather(-1, targets[..., None])
            b = torch.log_softmax(logits(incremental[:, half:-1]), -1).gather(-1, targets[..., None])
            diff = (a - b).abs()
            result[name] = {"mean": float(diff.mean()), "max": float(diff.max())}
            print(f"{name:>13}: mean |diff| {diff.mean():.4f}, max {diff.max():.4f} per token ({diff.numel()} tokens)")
    speed = decode_speed(body, head, args.seed)
    out_dir = ROOT / ".artifacts" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "head-gap.json").write_text(
        json.dumps({"model": DEFAULT_BASE_MODEL, "args": vars(args), "gaps": result, "decode": speed}, indent=1)
    )


def decode_speed(body, head, seed: int, steps: int = 24, rounds: int = 3) -> dict[str, dict[str, float]]:
    """Decode tokens/s at 1 and 32 rows with the bf16 and the float32 head (the median round)."""
    import statistics
    import time

    from transformers import DynamicCache

    heads = {"bf16 head": lambda h: head(h).float(), "float32 head": lambda h: float32_logits(head, h)}
    out: dict[str, dict[str, float]] = {}
    for rows in (1, 32):
        torch.manual_seed(seed)
        prompt = torch.randint(0, head.weight.shape[0], (rows, 64))
        times: dict[str, list[float]] = {name: [] for name in heads}
        for _ in range(rounds):
            for name, logits in heads.items():
                with torch.no_grad():
                    state = body(input_ids=prompt, past_key_values=DynamicCache(), use_cache=True)
                    token = logits(state.last_hidden_state[:, -1:]).argmax(-1)
                    started = time.perf_counter()
                    for _ in range(steps):
                        state = body(input_ids=token, past_key_values=state.past_key_values, use_cache=True)
                        token = logits(state.last_hidden_state[:, -1:]).argmax(-1)
                    times[name].append(time.perf_counter() - started)
        out[f"{rows} rows"] = {name: rows * steps / statistics.median(t) for name, t in times.items()}
        print(f"decode, {rows:>2} rows: " + ", ".join(f"{name} {v:.1f} tokens/s" for name, v in out[f"{rows} rows"].items()))
    return out


if __name__ == "__main__":
    main()
