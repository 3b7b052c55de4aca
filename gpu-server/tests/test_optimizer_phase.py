"""RL after a warm start starts with fresh optimizer moments (service/optimizer_phase.py).

After SFT, Adam's moments point along SFT's last gradients and are scaled by their size. An RL step
that inherits them moves mostly along SFT's direction: measured here, the cosine of the first RL
update with the RL gradient (the same batch's gradient, recomputed in this process by the trainer's
own code from the checkpoint it started at). With fresh moments Adam's first update is about
-lr * sign(gradient), whose cosine with the gradient is high; with SFT's it is near 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from in_process import Holder
from safetensors.torch import load_file

from art_server.trainer.grpo import train_step
from art_server.trainer.grpo_config import GRPOConfig
from art_server.trainer.grpo_prepare import prepare
from art_server.trainer.lora import LoraHost, LoraSpec

from rl import CELLS, board_prompt, choice_item, sample, step

LR = 1e-3
CONVERSATIONS = [
    {"messages": [*board_prompt(". . .\n. X .\n. . ."), {"role": "assistant", "content": cell}]} for cell in CELLS[:4]
]


def warm_then_rl(client, name: str, **rl) -> tuple[list[list[dict]], dict]:
    r = client.post("/v1/art/models/register", json={"name": name, "project": "phase", "base_model": "builtin:tiny"})
    assert r.status_code == 200, r.text
    step(client, name, CONVERSATIONS, path="train_sft", learning_rate=1e-2, epochs=4, batch_size=2)  # 8 Adam steps
    messages = board_prompt(". . .\n. . .\n. . .")
    out = sample(client, name, messages, 8, 4, seed=3)
    group = [
        {"messages_and_choices": [*messages, choice_item(out, ch)], "reward": float("B2" in ch["message"]["content"]) + i / 10}
        for i, ch in enumerate(out["choices"])
    ]
    result = step(client, name, [group], learning_rate=LR, **rl)[-1]
    assert result["step"] == 2
    return [group], result["metrics"]


def checkpoint(client, name: str, at: int) -> Path:
    rows = client.get(f"/v1/art/models/{name}/checkpoints").json()
    return Path(next(r["path"] for r in (rows["checkpoints"] if isinstance(rows, dict) else rows) if r["step"] == at))


def rl_gradient(tiny_path, client, name: str, groups: list[list[dict]]) -> dict[str, torch.Tensor]:
    """The GRPO gradient of `groups` at the model's step 1, as the server computed it (same code, fp32)."""
    host = LoraHost(Holder(tiny_path))
    host.add_slot("s", LoraSpec().peft_config())
    host.load_weights("s", load_file(str(checkpoint(client, name, 1) / "adapter_model.safetensors")))
    grads: dict[str, torch.Tensor] = {}
    names = {p: n.replace(".s.", ".") for n, p in host.model.named_parameters() if ".s." in n}
    capture = torch.optim.SGD(host.parameters("s"), lr=0.0)
    capture.register_step_pre_hook(lambda opt, *_: grads.update({names[p]: p.grad.clone() for p in host.parameters("s")}))
    config = GRPOConfig(learning_rate=LR)
    train_step(host, "s", capture, prepare(groups, config, 1 << 20, step=1), config, 0)
    return grads


def update_cosines(client, tiny_path, name: str, groups: list[list[dict]]) -> tuple[float, float]:
    """The first RL update's cosine with the RL descent direction, and with the update fresh Adam
    moments take from that gradient: -lr g / (|g| + eps) (at Adam's first step its bias corrections
    make m = g and v = g^2)."""
    before = load_file(str(checkpoint(client, name, 1) / "adapter_model.safetensors"))
    after = load_file(str(checkpoint(client, name, 2) / "adapter_model.safetensors"))
    grads = rl_gradient(tiny_path, client, name, groups)
    keys = sorted(grads)
    assert keys and all(k in before for k in keys), (keys[:2], list(before)[:2])
    delta = torch.cat([(after[k] - before[k]).flatten() for k in keys])
    g = torch.cat([grads[k].flatten() for k in keys])
    fresh_adam = -LR * g / (g.abs() + 1e-8)
    cosine = torch.nn.functional.cosine_similarity
    return float(cosine(delta, -g, dim=0)), float(cosine(delta, fresh_adam, dim=0))


def adam_steps(client, name: str, at: int) -> set[int]:
    state = torch.load(checkpoint(client, name, at) / "optimizer.pt", weights_only=True)["state"]
    return {int(s["step"]) for s in state.values()}


def test_the_first_rl_step_after_sft_moves_along_the_rl_gradient(client, tiny_path):
    groups, metrics = warm_then_rl(client, "fresh")
    assert metrics.get("optimizer_reset") is True, metrics
    assert adam_steps(client, "fresh", 1) == {8} and adam_steps(client, "fresh", 2) == {1}
    fresh = update_cosines(client, tiny_path, "fresh", groups)
    kept_groups, kept_metrics = warm_then_rl(client, "inherited", reset_optimizer=False)
    assert "optimizer_reset" not in kept_metrics and adam_steps(client, "inherited", 2) == {9}
    inherited = update_cosines(client, tiny_path, "inherited", kept_groups)
    print(
        f"\nfirst RL update's cosine with the RL descent direction: fresh moments {fresh[0]:.3f}, SFT's {inherited[0]:.3f}; "
        f"with fresh Adam's update of the RL gradient: {fresh[1]:.4f}, {inherited[1]:.3f}"
    )
    assert fresh[1] > 0.999  # Adam's first step of the RL gradient, nothing of SFT's
    assert inherited[1] < 0.9 and inherited[0] < fresh[0] * 0.75 and not math.isnan(inherited[0])


def test_a_later_rl_step_keeps_its_moments_and_sft_after_rl_starts_fresh(client):
    groups, _ = warm_then_rl(client, "phases")
    more = step(client, "phases", groups, learning_rate=LR)[-1]
    assert "optimizer_reset" not in more["metrics"] and adam_steps(client, "phases", 3) == {2}
    back = step(client, "phases", CONVERSATIONS, path="train_sft", learning_rate=1e-2, epochs=1, batch_size=4)[-1]
    assert back["metrics"].get("optimizer_reset") is True and adam_steps(client, "phases", 4) == {1}
    # Asked for, any step starts fresh.
    again = step(client, "phases", groups, learning_rate=LR, reset_optimizer=True)[-1]
    assert again["metrics"].get("optimizer_reset") is True and adam_steps(client, "phases", 5) == {1}


@pytest.fixture()
def client(server):
    with server.client(timeout=300) as c:
        yield c
