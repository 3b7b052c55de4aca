"""Training benchmark: the same tiny model trained on the same fixed trajectories with this
project's GRPO trainer and with trl's GRPOTrainer (whose `rollout_func` takes precomputed ids and
logprobs), printing trained completion tokens/s for both and their ratio; then, through the real
server over HTTP, the time from "step trained" to "new adapter serving" (save + reload).

    npm run bench:train [-- --groups 8 --steps 10]

Raw data: .artifacts/bench/train.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "gpu-server" / "tests"))

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def fixed_groups(model, tok, groups: int, size: int, tokens: int, seed: int) -> list[dict]:
    """Prompts, sampled completions with their logprobs, and fixed rewards (the same for both trainers)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(groups):
        messages = [{"role": "user", "content": f"Board {k}: name an empty cell."}]
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        completions, logprobs = [], []
        for _ in range(size):
            ids, lps = list(prompt), []
            with torch.no_grad():
                for _ in range(tokens):
                    logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
                    lp = torch.log_softmax(logits, -1)
                    t = int(torch.multinomial(lp.exp(), 1, generator=g))
                    ids.append(t)
                    lps.append(float(lp[t]))
            completions.append(ids[len(prompt):])
            logprobs.append(lps)
        rewards = [float(torch.rand(1, generator=g)) for _ in range(size)]
        out.append({"messages": messages, "prompt_ids": prompt, "completions": completions, "logprobs": logprobs,
                    "rewards": rewards})
    return out


def as_groups(data: list[dict]) -> list[list[dict]]:
    """The fixed groups as the server's trainer takes them (trajectories with sampled choices)."""
    return [[{"messages_and_choices": [*d["messages"], {"kind": "choice", "message": {"role": "assistant", "content": ""},
                                                        "prompt_token_ids": d["prompt_ids"], "token_ids": c, "logprobs": lp}],
              "reward": r} for c, lp, r in zip(d["completions"], d["logprobs"], d["rewards"])] for d in data]


def bench_ours(base_path: Path, data: list[dict], steps: int, micro_batch: int) -> dict:
    from transformers import AutoModelForCausalLM

    from art_server.models.trainable import LoraSpec, make_optimizer
    from art_server.trainer.grpo import GRPOConfig, prepare, train_step
    from art_server.trainer.lora import LoraHost

    class Holder:
        device = torch.device("cpu")
        model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)

    host = LoraHost(Holder())
    host.add_slot("bench", LoraSpec().peft_config())
    optimizer = make_optimizer(host, "bench")
    groups = as_groups(data)
    config = GRPOConfig(learning_rate=1e-4, micro_batch_size=micro_batch, scale_rewards=True)
    times, tokens = [], 0
    for i in range(steps + 1):
        started = time.perf_counter()
        prepared = prepare(groups, config, 2048)
        result = train_step(host, "bench", optimizer, prepared, config, 0)
        if i:  # the first step warms up
            times.append(time.perf_counter() - started)
            tokens += result["tokens_trained"]
    return {"seconds": sum(times), "tokens": tokens, "tokens_per_s": tokens / sum(times), "step_s": statistics.median(times)}


def bench_trl(base_path: Path, data: list[dict], steps: int, micro_batch: int, out_dir: Path) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    size = len(data[0]["completions"])
    by_prompt = {d["messages"][0]["content"]: d for d in data}

    def rollout(prompts, trainer):
        # trl's sampler repeats each prompt num_generations times: hand out that group's
        # completions in order (all of them when a prompt comes once).
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "fixed_reward": []}
        seen: dict[str, int] = {}
        keys = [p[0]["content"] if isinstance(p, list) else p for p in prompts]
        for key in keys:
            d = by_prompt[key]
            picks = range(size) if keys.count(key) == 1 else [seen.get(key, 0) % size]
            seen[key] = seen.get(key, 0) + 1
            for i in picks:
                out["prompt_ids"].append(d["prompt_ids"])
                out["completion_ids"].append(d["completions"][i])
                out["logprobs"].append(d["logprobs"][i])
                out["fixed_reward"].append(d["rewards"][i])
        return out

    def reward(prompts, completions, fixed_reward, **_):
        return fixed_reward

    class Timer(TrainerCallback):
        def __init__(self):
            self.times = []
            self._t = None

        def on_step_begin(self, *a, **k):
            self._t = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self._t)

    dataset = Dataset.from_list([{"prompt": d["messages"]} for d in data])
    tok = AutoTokenizer.from_pretrained(base_path)
    config = GRPOConfig(
        output_dir=str(out_dir / "trl"), learning_rate=1e-4, per_device_train_batch_size=size * len(data),
        num_generations=size, max_completion_length=len(data[0]["completions"][0]), max_steps=steps + 1,
        gradient_accumulation_steps=1, logging_steps=10_000, save_strategy="no", report_to=[], use_cpu=True,
        bf16=False, fp16=False, beta=0.0, num_iterations=1, shuffle_dataset=False, dataloader_num_workers=0,
        disable_tqdm=True, seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    timer = Timer()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset, processing_class=tok,
                          peft_config=LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
                          rollout_func=rollout, callbacks=[timer])
    trainer.train()
    times = timer.times[1:]
    tokens = steps * sum(len(c) for d in data for c in d["completions"])
    return {"seconds": sum(times), "tokens": tokens, "tokens_per_s": tokens / sum(times), "step_s": statistics.median(times)}


def bench_swap(data: list[dict], steps: int, out_dir: Path) -> dict:
    from conftest import start_server
    from rl import step

    srv = start_server(out_dir / "swap-data", "--base-model", "builtin:tiny", "--log-level", "warning")
    try:
        with srv.client() as c:
            c.post("/v1/art/models/register", json={"name": "swap", "project": "bench", "base_model": "builtin:tiny"})
            groups = as_groups(data)
            rows = [step(c, "swap", groups, learning_rate=1e-4)[-1]["metrics"] for _ in range(steps)]
    finally:
        srv.stop()
    save = [r["save_s"] for r in rows]
    reload = [r["reload_s"] for r in rows]
    return {"save_s": save, "reload_s": reload, "median_save_ms": statistics.median(save) * 1000,
            "median_reload_ms": statistics.median(reload) * 1000,
            "median_swap_ms": statistics.median(s + r for s, r in zip(save, reload)) * 1000}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from art_server.models.builtin import builtin_path

    out_dir = ROOT / ".artifacts" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    base = builtin_path("builtin:tiny", out_dir / "data")
    model = AutoModelForCausalLM.from_pretrained(base)
    tok = AutoTokenizer.from_pretrained(base)
    data = fixed_groups(model, tok, a.groups, a.group_size, a.tokens, seed=0)
    batch = a.groups * a.group_size
    ours = bench_ours(base, data, a.steps, micro_batch=batch)
    theirs = bench_trl(base, data, a.steps, batch, out_dir)
    swap = bench_swap(data, a.steps, out_dir)
    import trl

    print(f"\nTraining benchmark: builtin:tiny, LoRA r=8 on all projections, {a.groups} groups x {a.group_size} "
          f"trajectories x {a.tokens} tokens per step, {a.steps} timed steps, CPU\n")
    print("| trainer | trained tokens/s | median step |")
    print("| --- | ---: | ---: |")
    print(f"| art-server GRPO | {ours['tokens_per_s']:.0f} | {ours['step_s'] * 1000:.1f} ms |")
    print(f"| trl {trl.__version__} GRPOTrainer (rollout_func) | {theirs['tokens_per_s']:.0f} | {theirs['step_s'] * 1000:.1f} ms |")
    print(f"\nratio art-server / trl: {ours['tokens_per_s'] / theirs['tokens_per_s']:.2f}x")
    print(f"step trained -> new adapter serving (over HTTP, median of {a.steps}): {swap['median_swap_ms']:.1f} ms "
          f"(save {swap['median_save_ms']:.1f} ms, load into serving {swap['median_reload_ms']:.1f} ms)")
    out = out_dir / "train.json"
    out.write_text(json.dumps({"config": vars(a), "ours": ours, "trl": theirs, "swap": swap, "trl_version": trl.__version__}, indent=2))
    print(f"raw data: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
