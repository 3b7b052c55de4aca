"""Small LoRA adapters for the serving tests, trained directly with peft (not the server's
trainer) to answer one prompt with one fixed text, so their outputs are known."""

from __future__ import annotations

from pathlib import Path

import torch


def train_fixed_answer_adapter(
    base: Path,
    out: Path,
    messages: list[dict],
    answer: str,
    tools: list[dict] | None = None,
    steps: int = 60,
    lr: float = 2e-2,
    seed: int = 0,
) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (out / "adapter_config.json").exists():
        return out
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0))
    prompt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    target = tok.encode(answer, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
    ids = torch.tensor([prompt + target])
    labels = torch.tensor([[-100] * len(prompt) + target])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(str(out))
    return out
