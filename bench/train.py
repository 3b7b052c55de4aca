"""Training benchmark, on the default base model (SmolLM2-135M-Instruct) unless --model says otherwise.

1. Trainer throughput: the same fixed trajectories (G groups x S rollouts, a chat prompt shared by
   each group, T completion tokens) trained with this project's GRPO trainer and with trl's
   GRPOTrainer (whose `rollout_func` takes precomputed ids and logprobs), in fp32 and in bf16, in
   this one run: trained completion tokens/s and the ratio.
2. A cookbook step through the real server over HTTP (tic-tac-toe-shaped: a system message and a
   board, a few tokens per answer): where its time goes (rollout, tokenize, forward/backward,
   save, reload), and the time from "step trained" to "new adapter serving".

    npm run bench:train [-- --steps 5 --model builtin:tiny]

3. With `--ranks 1,2`: instead of 1 and 2, the same fixed trajectories trained by the real server
   with --train-ranks 1, then 2 (torch.distributed, gloo on CPU; this machine's cores shared evenly
   between the ranks): step time, trained tokens/s, and the bytes each optimizer step moves between
   ranks, with what they would cost over NVLink and 100 Gb Ethernet for this model and a 7B one.
4. With `--placements`: only the cookbook step of 2. on the vllm engine, vLLM and the trainer
   sharing every core, then vLLM on core 0 and the trainer on core 1 (--inference-devices cpu:0
   --train-devices cpu:1).

Raw data: .artifacts/bench/train.json (ranks: train-ranks.json, placements: train-placements.json)

Over 400 lines: one benchmark's two parts share its set-up, and its table is printed from both.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "gpu-server" / "tests"))

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def fixed_groups(base_path: Path, groups: int, size: int, tokens: int, seed: int) -> list[dict]:
    """Prompts, completions with the policy's logprobs of them, and fixed rewards (the same for both
    trainers). Completions are random tokens: the work of a step does not depend on which they are."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_path)
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    rng = random.Random(seed)
    out = []
    for k in range(groups):
        messages = [
            {"role": "system", "content": "You play tic-tac-toe as X. Reply with one empty cell name, like B2."},
            {"role": "user", "content": f"Board {k}:\nA1 X  A3\nB1 O  B3\nC1 C2 C3\nYour move?"},
        ]
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        completions = [[rng.randrange(len(tok)) for _ in range(tokens)] for _ in range(size)]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + c for c in completions])).logits[:, len(prompt) - 1 : -1].float()
        picked = torch.log_softmax(logits, -1).gather(-1, torch.tensor(completions)[..., None]).squeeze(-1)
        out.append(
            {
                "messages": messages,
                "prompt_ids": prompt,
                "completions": completions,
                "logprobs": picked.tolist(),
                "rewards": [rng.random() for _ in range(size)],
            }
        )
    return out


def as_groups(data: list[dict]) -> list[list[dict]]:
    """The fixed groups as the server's trainer takes them (trajectories with sampled choices)."""
    return [
        [
            {
                "messages_and_choices": [
                    *d["messages"],
                    {
                        "kind": "choice",
                        "message": {"role": "assistant", "content": ""},
                        "prompt_token_ids": d["prompt_ids"],
                        "token_ids": c,
                        "logprobs": lp,
                    },
                ],
                "reward": r,
            }
            for c, lp, r in zip(d["completions"], d["logprobs"], d["rewards"])
        ]
        for d in data
    ]


def bench_ours(base_path: Path, data: list[dict], steps: int, dtype: str) -> dict:
    from transformers import AutoModelForCausalLM

    from art_server.service.trainable import make_optimizer
    from art_server.trainer.grpo import train_step
    from art_server.trainer.grpo_config import GRPOConfig
    from art_server.trainer.grpo_prepare import prepare
    from art_server.trainer.lora import LoraHost, LoraSpec

    class Holder:
        device = torch.device("cpu")
        model = AutoModelForCausalLM.from_pretrained(base_path, dtype=DTYPES[dtype])

    host = LoraHost(Holder())
    host.add_slot("bench", LoraSpec().peft_config())
    optimizer = make_optimizer(host, "bench")
    groups = as_groups(data)
    config = GRPOConfig(learning_rate=1e-5)
    times, tokens = [], 0
    for i in range(steps + 1):
        started = time.perf_counter()
        prepared = prepare(groups, config, 8192)
        result = train_step(host, "bench", optimizer, prepared, config, 0)
        if i:  # the first step warms up
            times.append(time.perf_counter() - started)
            tokens += result["tokens_trained"]
    return {"seconds": sum(times), "tokens": tokens, "tokens_per_s": tokens / sum(times), "step_s": statistics.median(times)}


def bench_trl(base_path: Path, data: list[dict], steps: int, dtype: str, out_dir: Path) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    size = len(data[0]["completions"])
    by_prompt = {d["messages"][1]["content"]: d for d in data}

    def rollout(prompts, trainer):
        # trl's sampler repeats each prompt num_generations times: hand out that group's
        # completions in order (all of them when a prompt comes once).
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "fixed_reward": []}
        seen: dict[str, int] = {}
        keys = [p[-1]["content"] if isinstance(p, list) else p for p in prompts]
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
        output_dir=str(out_dir / "trl"),
        learning_rate=1e-5,
        per_device_train_batch_size=size * len(data),
        num_generations=size,
        max_completion_length=len(data[0]["completions"][0]),
        max_steps=steps + 1,
        gradient_accumulation_steps=1,
        logging_steps=10_000,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        fp16=False,
        beta=0.0,
        num_iterations=1,
        shuffle_dataset=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=DTYPES[dtype])
    timer = Timer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tok,
        peft_config=LoraConfig(
            r=8,
            lora_alpha=16,
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        ),
        rollout_func=rollout,
        callbacks=[timer],
    )
    trainer.train()
    times = timer.times[1:]
    tokens = steps * sum(len(c) for d in data for c in d["completions"])
    return {"seconds": sum(times), "tokens": tokens, "tokens_per_s": tokens / sum(times), "step_s": statistics.median(times)}


CELLS = [f"{r}{c}" for r in "ABC" for c in "123"]


def cookbook_rollout(client, model: str, seed: int) -> dict:
    """One tic-tac-toe-shaped turn (a system message and a board, 4 tokens of answer)."""
    from rl import choice_item, sample

    rng = random.Random(seed // 8)  # the 8 rollouts of a group see the same board
    board = {c: rng.choice("XO.") for c in CELLS}
    text = "\n".join(" ".join(c if board[c] == "." else board[c] + " " for c in (r + "1", r + "2", r + "3")) for r in "ABC")
    messages = [
        {"role": "system", "content": "You play tic-tac-toe as X. Reply with one empty cell name, like B2. Nothing else."},
        {"role": "user", "content": text},
    ]
    r = sample(client, model, messages, 1, 4, seed=seed, temperature=0.7)
    choice = r["choices"][0]
    hit = any(c in (choice["message"]["content"] or "") and board[c] == "." for c in CELLS)
    return {"messages_and_choices": [*messages, choice_item(r, choice)], "reward": float(hit)}


def bench_cookbook_step(model: str, steps: int, groups: int, size: int, out_dir: Path, server_args: tuple[str, ...] = ()) -> dict:
    """Steps of a cookbook loop through the server over HTTP: gather the rollouts (concurrently, as the
    TypeScript client does), then train; the server reports where the step's time went."""
    import shutil

    from conftest import start_server
    from rl import step

    data = out_dir / f"cookbook-data-{os.getpid()}"
    shutil.rmtree(data, ignore_errors=True)
    srv = start_server(data, "--base-model", model, "--log-level", "warning", *server_args, timeout=900)
    rows = []
    try:
        with srv.client(timeout=600) as c, ThreadPoolExecutor(groups * size) as pool:
            c.post("/v1/art/models/register", json={"name": "bench", "project": "bench", "base_model": model}).raise_for_status()
            for s in range(steps + 1):
                started = time.perf_counter()
                trajectories = list(pool.map(lambda i: cookbook_rollout(c, "bench", s * 1000 + i), range(groups * size)))
                rollout_s = time.perf_counter() - started
                batch = [trajectories[g * size : (g + 1) * size] for g in range(groups)]
                started = time.perf_counter()
                metrics = step(c, "bench", batch, learning_rate=3e-4)[-1]["metrics"]  # scored at each turn's recorded 0.7
                if s:  # the first step warms up
                    rows.append(
                        {
                            "rollout_s": rollout_s,
                            "train_request_s": time.perf_counter() - started,
                            **{
                                k: metrics.get(k, 0.0)
                                for k in ("tokenize_s", "forward_backward_s", "save_s", "reload_s", "tokens_trained", "sequences")
                            },
                        }
                    )
    finally:
        srv.stop()
    for r in rows:
        r["step_s"] = r["rollout_s"] + r["train_request_s"]
    keys = ["rollout_s", "tokenize_s", "forward_backward_s", "save_s", "reload_s", "train_request_s", "tokens_trained", "step_s"]
    return {"steps": rows, "median": {k: statistics.median(r[k] for r in rows) for k in keys}}


PLACEMENTS = {
    "vLLM and trainer share every core": ("--engine", "vllm"),
    "vLLM on core 0, trainer on core 1": ("--engine", "vllm", "--inference-devices", "cpu:0", "--train-devices", "cpu:1"),
}


def bench_placements(model: str, steps: int, groups: int, size: int, out_dir: Path) -> None:
    """The cookbook step with vLLM sharing the cores with the trainer, then each pinned to its own."""
    results = {name: bench_cookbook_step(model, steps, groups, size, out_dir, args) for name, args in PLACEMENTS.items()}
    print(
        f"\nA cookbook step through the server on vLLM ({groups} x {size} tic-tac-toe turns, 4 tokens each; "
        f"median of {steps} after a warm-up), {os.cpu_count()} CPU cores:\n"
    )
    print("| placement | rollout | forward/backward | whole train request | whole step |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, r in results.items():
        m = r["median"]
        print(
            f"| {name} | {m['rollout_s']:.2f} s | {m['forward_backward_s']:.2f} s | {m['train_request_s']:.2f} s | "
            f"{m['step_s']:.2f} s |"
        )
    out = out_dir / "train-placements.json"
    out.write_text(
        json.dumps({"model": model, "placements": {k: list(v) for k, v in PLACEMENTS.items()}, "results": results}, indent=2)
    )
    print(f"raw data: {out.relative_to(ROOT)}")


# LoRA r=8 on q,k,v,o,gate,up,down: (hidden, kv dim, intermediate, layers) of two models, for the
# all-reduce volume table (the 7B shape is Qwen2.5-7B's config.json).
SHAPES = {"SmolLM2-135M": (576, 192, 1536, 30), "Qwen2.5-7B": (3584, 512, 18944, 28)}
LINKS = {"NVLink 4 (H100, ~450 GB/s each way)": 450e9, "100 Gb Ethernet (12.5 GB/s)": 12.5e9}


def lora_params(hidden: int, kv: int, inter: int, layers: int, r: int = 8) -> int:
    pairs = [(hidden, hidden), (hidden, kv), (hidden, kv), (hidden, hidden), (hidden, inter), (hidden, inter), (inter, hidden)]
    return layers * sum(r * (a + b) for a, b in pairs)


def bench_ranks(model: str, data: list[dict], ranks: list[int], steps: int, out_dir: Path) -> None:
    """The same fixed groups through the real server with --train-ranks R, for each R."""
    from conftest import start_server
    from rl import step

    groups = as_groups(data)
    cores = os.cpu_count() or 1
    results = []
    for r in ranks:
        srv = start_server(
            out_dir / f"ranks-data-{r}-{os.getpid()}", "--base-model", model, "--log-level", "warning", "--train-ranks", str(r)
        )
        try:
            with srv.client(timeout=1200) as c:
                c.post(
                    "/v1/art/models/register", json={"name": "bench", "project": "bench", "base_model": model}
                ).raise_for_status()
                rows = []
                for s in range(steps + 1):
                    started = time.perf_counter()
                    metrics = step(c, "bench", groups, learning_rate=1e-5)[-1]["metrics"]
                    if s:  # the first step warms up
                        rows.append(
                            {
                                "request_s": time.perf_counter() - started,
                                "forward_backward_s": metrics["forward_backward_s"],
                                "tokens_trained": metrics["tokens_trained"],
                                "loss": metrics["loss"],
                            }
                        )
        finally:
            srv.stop()
        fb = statistics.median(x["forward_backward_s"] for x in rows)
        results.append(
            {
                "ranks": r,
                "threads_per_rank": max(1, cores // r),
                "steps": rows,
                "forward_backward_s": fb,
                "request_s": statistics.median(x["request_s"] for x in rows),
                "tokens_per_s": rows[0]["tokens_trained"] / fb,
            }
        )
    base = results[0]["tokens_per_s"]
    print(
        f"\nTrainer ranks: {model}, {len(data)} groups x {len(data[0]['completions'])} trajectories, {steps} timed steps "
        f"after one warm-up, through the server (--train-ranks R), {cores} CPU cores shared evenly\n"
    )
    print("| ranks | threads per rank | forward/backward (median) | whole train request | trained tokens/s | vs first |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for x in results:
        print(
            f"| {x['ranks']} | {x['threads_per_rank']} | {x['forward_backward_s']:.2f} s | {x['request_s']:.2f} s | "
            f"{x['tokens_per_s']:.0f} | {x['tokens_per_s'] / base:.2f}x |"
        )
    print(
        "\nWhat ranks exchange per optimizer step: the LoRA gradients (a reduce onto rank 0) and the new weights (a "
        "broadcast), fp32, i.e. 2x the LoRA parameters, what a ring all-reduce moves per GPU. Time on the wire at full "
        "bandwidth:\n"
    )
    print("| model (LoRA r=8, all projections) | LoRA parameters | bytes per optimizer step | " + " | ".join(LINKS) + " |")
    print("| --- | ---: | ---: | " + " | ".join("---:" for _ in LINKS) + " |")
    volume = {}
    for name, shape in SHAPES.items():
        n = lora_params(*shape)
        moved = 2 * 4 * n
        volume[name] = {"lora_params": n, "bytes": moved}
        print(
            f"| {name} | {n / 1e6:.1f} M | {moved / 1e6:.0f} MB | "
            + " | ".join(f"{moved / bw * 1000:.2f} ms" for bw in LINKS.values())
            + " |"
        )
    out = out_dir / "train-ranks.json"
    out.write_text(json.dumps({"model": model, "results": results, "volume": volume, "links_bytes_per_s": LINKS}, indent=2))
    print(f"raw data: {out.relative_to(ROOT)}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--ranks", default="", help="e.g. 1,2: only the trainer-ranks benchmark, for each number of ranks")
    p.add_argument(
        "--placements",
        action="store_true",
        help="only the cookbook step on vLLM, sharing the cores with the trainer vs each on its own core",
    )
    a = p.parse_args()
    from art_server.core.allocator import keep_freed_memory
    from art_server.models.resolve import resolve_base_model

    keep_freed_memory()  # as the server does at start
    out_dir = ROOT / ".artifacts" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    if a.placements:
        bench_placements(a.model, a.steps, a.groups, a.group_size, out_dir)
        return
    cache = Path(os.environ.get("ART_MODEL_CACHE") or ROOT / ".art" / "models")
    base = resolve_base_model(a.model, out_dir / "data", cache).path
    torch.manual_seed(0)
    data = fixed_groups(base, a.groups, a.group_size, a.tokens, seed=0)
    if a.ranks:
        bench_ranks(a.model, data, [int(r) for r in a.ranks.split(",")], a.steps, out_dir)
        return
    trainers = {}
    for dtype in a.dtypes.split(","):
        trainers[dtype] = {"ours": bench_ours(base, data, a.steps, dtype), "trl": bench_trl(base, data, a.steps, dtype, out_dir)}
    cookbook = bench_cookbook_step(a.model, a.steps, a.groups, a.group_size, out_dir)
    import trl

    prompt = len(data[0]["prompt_ids"])
    print(
        f"\nTraining benchmark: {a.model}, LoRA r=8 on all projections, {a.groups} groups x {a.group_size} trajectories "
        f"({prompt}-token prompt shared by a group, {a.tokens} completion tokens), {a.steps} timed steps after one warm-up, "
        f"CPU ({torch.get_num_threads()} threads)\n"
    )
    print("| dtype | trainer | trained tokens/s | median step | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for dtype, r in trainers.items():
        ratio = r["ours"]["tokens_per_s"] / r["trl"]["tokens_per_s"]
        print(f"| {dtype} | art-server GRPO | {r['ours']['tokens_per_s']:.0f} | {r['ours']['step_s']:.2f} s | **{ratio:.2f}x** |")
        print(
            f"| {dtype} | trl {trl.__version__} GRPOTrainer (rollout_func) | {r['trl']['tokens_per_s']:.0f} | {r['trl']['step_s']:.2f} s | 1 |"
        )
    m = cookbook["median"]
    print(
        f"\nA cookbook step over HTTP ({a.groups} x {a.group_size} tic-tac-toe turns, 4 tokens each; server dtype auto; "
        f"median of {a.steps}):\n"
    )
    print("| rollout | tokenize | forward/backward | save | reload | whole train request | tokens trained |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| {m['rollout_s']:.2f} s | {m['tokenize_s'] * 1000:.0f} ms | {m['forward_backward_s']:.2f} s | "
        f"{m['save_s'] * 1000:.0f} ms | {m['reload_s'] * 1000:.0f} ms | {m['train_request_s']:.2f} s | {m['tokens_trained']:.0f} |"
    )
    print(f"\nstep trained -> new adapter serving: {(m['save_s'] + m['reload_s']) * 1000:.0f} ms (save + load into serving)")
    out = out_dir / "train.json"
    out.write_text(
        json.dumps({"config": vars(a), "trainers": trainers, "cookbook_step": cookbook, "trl_version": trl.__version__}, indent=2)
    )
    print(f"raw data: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
