"""Client-side helpers for the training tests: rollouts through the server's OpenAI endpoint and
steps over HTTP, as the TypeScript client does them."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

CELLS = [f"{r}{c}" for r in "ABC" for c in "123"]


def choice_item(response: dict[str, Any], choice: dict[str, Any]) -> dict[str, Any]:
    """A sampled choice as the trainer takes it: prompt ids, sampled ids and their logprobs."""
    return {
        "kind": "choice",
        "message": choice["message"],
        "prompt_token_ids": response["prompt_token_ids"],
        "token_ids": choice["token_ids"],
        "logprobs": [e["logprob"] for e in choice["logprobs"]["content"]],
        "finish_reason": choice["finish_reason"],
        "art_provenance": choice["art_provenance"],
        **({"art_policy_step": choice["art_policy_step"]} if "art_policy_step" in choice else {}),
        **({"art_sampling": choice["art_sampling"]} if "art_sampling" in choice else {}),
    }


def sample(
    client: httpx.Client,
    model: str,
    messages: list[dict],
    n: int,
    max_tokens: int,
    seed: int | None = None,
    temperature: float = 1.0,
) -> dict[str, Any]:
    body = {"model": model, "messages": messages, "n": n, "max_tokens": max_tokens, "temperature": temperature}
    if seed is not None:
        body["seed"] = seed
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def step(client: httpx.Client, name: str, groups: list[Any], path: str = "train", **config: Any) -> list[dict]:
    """Posts one step (GRPO: groups of trajectories; train_sft: conversations) and returns its NDJSON lines (the last is the result)."""
    key = "groups" if path == "train" else "conversations"
    with client.stream("POST", f"/v1/art/models/{name}/{path}", json={key: groups, "config": config}) as r:
        if r.status_code != 200:
            r.read()
            raise AssertionError(f"{r.status_code}: {r.text}")
        lines = [json.loads(line) for line in r.iter_lines() if line.strip()]
    assert lines[-1]["type"] == "result", lines[-1]
    return lines


def board_prompt(board: str) -> list[dict]:
    return [
        {"role": "system", "content": "You play tic-tac-toe. Name an empty cell, like B2."},
        {"role": "user", "content": f"Board:\n{board}\nName an empty cell."},
    ]


def names_empty_cell(text: str, board_cells: dict[str, str]) -> bool:
    return any(cell in text and board_cells.get(cell) == "." for cell in CELLS)


def run_toy_training(
    client: httpx.Client,
    name: str,
    steps: int,
    seed: int,
    lr: float,
    turns: int = 1,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Trains "name an empty cell" (one turn, or `turns` turns in one conversation) and returns the
    mean reward of each step's group."""
    import random

    rng = random.Random(seed)
    rewards_per_step = []
    for s in range(steps):
        cells = {c: rng.choice("XO.") if rng.random() < 0.3 else "." for c in CELLS}
        board = "\n".join(" ".join(cells[f"{r}{c}"] for c in "123") for r in "ABC")
        messages = board_prompt(board)
        group = [{"messages_and_choices": list(messages), "reward": 0.0} for _ in range(8)]
        hits = [0] * 8
        for turn in range(turns):
            if turn:
                # Each trajectory continues its own conversation: one request per trajectory, sent
                # together as a client's parallel rollouts are (the engine batches them).
                def next_turn(t: int, traj: dict, turn: int = turn, s: int = s) -> dict:
                    msgs = [m if "role" in m else m["message"] for m in traj["messages_and_choices"]]
                    msgs.append({"role": "user", "content": "Name another empty cell."})
                    traj["messages_and_choices"].append(msgs[-1])
                    return sample(client, name, msgs, 1, 6, seed=seed * 100_000 + s * 100 + turn * 10 + t)

                with ThreadPoolExecutor(len(group)) as pool:
                    answers = list(pool.map(next_turn, range(len(group)), group))
                for t, (traj, r) in enumerate(zip(group, answers)):
                    traj["messages_and_choices"].append(choice_item(r, r["choices"][0]))
                    hits[t] += names_empty_cell(r["choices"][0]["message"]["content"] or "", cells)
            else:
                r = sample(client, name, messages, 8, 6, seed=seed * 100_000 + s)
                for t, choice in enumerate(r["choices"]):
                    group[t]["messages_and_choices"].append(choice_item(r, choice))
                    hits[t] += names_empty_cell(choice["message"]["content"] or "", cells)
        for t in range(8):
            group[t]["reward"] = hits[t] / turns
        mean = sum(hits) / (8 * turns)
        rewards_per_step.append(mean)
        step(client, name, [group], learning_rate=lr)
        if on_step:
            on_step(s, mean)
    return rewards_per_step
