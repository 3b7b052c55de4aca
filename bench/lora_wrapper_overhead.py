"""What the LoRA wrappers cost the base model's decode: one batch-8 decode step of SmolLM2-135M
(fp32, one thread, as the hf engine decodes on 2 cores), plain, and the same weights wrapped with 12
LoRA adapters (r=8, every projection) switched off as the engine serves the base model, and with one
switched on. Rounds take turns; prints the median step of each.

    .venv/bin/python bench/lora_wrapper_overhead.py     (from the repository root; ~1 minute)
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import torch

from art_server.core import adapter_switch
from art_server.models.resolve import resolve_base_model

BATCH, PROMPT, STEPS, ROUNDS, ADAPTERS = 8, 70, 30, 5, 12
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def decode_step_ms(model, switch) -> float:
    from transformers import DynamicCache

    ids = torch.randint(0, 1000, (BATCH, PROMPT), generator=torch.Generator().manual_seed(0))
    times = []
    with torch.inference_mode():
        out = model(
            input_ids=ids,
            attention_mask=torch.ones(BATCH, PROMPT, dtype=torch.long),
            past_key_values=DynamicCache(),
            use_cache=True,
        )
        cache = out.past_key_values
        for s in range(STEPS):
            length = PROMPT + s + 1
            started = time.perf_counter()
            with switch():
                out = model(
                    input_ids=ids[:, :1],
                    attention_mask=torch.ones(BATCH, length, dtype=torch.long),
                    position_ids=torch.full((BATCH, 1), length - 1),
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
            times.append(time.perf_counter() - started)
            cache = out.past_key_values
    return statistics.median(times) * 1000


def main() -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    path = str(resolve_base_model("HuggingFaceTB/SmolLM2-135M-Instruct", Path(tempfile.mkdtemp())).path)
    plain = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    peft = get_peft_model(
        AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), LoraConfig(r=8, target_modules=TARGETS), "a0"
    )
    for i in range(1, ADAPTERS):
        peft.add_adapter(f"a{i}", LoraConfig(r=8, target_modules=TARGETS))
    peft.eval()
    cases = {
        "plain model": (plain, contextlib.nullcontext),
        f"{ADAPTERS} adapters, all off (the base model)": (peft, lambda: adapter_switch.use(peft, None)),
        f"{ADAPTERS} adapters, one on": (peft, lambda: adapter_switch.use(peft, "a0")),
    }
    rounds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, (model, switch) in cases.items():
            rounds[name].append(decode_step_ms(model, switch))
    base = statistics.median(rounds["plain model"])
    print(f"\nbatch-{BATCH} decode step, SmolLM2-135M fp32, 1 thread, median of {ROUNDS} rounds x {STEPS} steps\n")
    print("| model | step (ms) | vs plain |\n| --- | ---: | ---: |")
    for name, values in rounds.items():
        print(f"| {name} | {statistics.median(values):.1f} | {statistics.median(values) / base:.3f}x |")


if __name__ == "__main__":
    main()
