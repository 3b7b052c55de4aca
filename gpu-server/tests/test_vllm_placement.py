"""Where vLLM runs (--inference-devices, vLLM's parallel sizes) and training on devices of its own:
the placement rules, the configuration errors, and on vLLM's CPU build two data-parallel replicas
that both serve each step's adapter, and vLLM and the trainer pinned to their own cores."""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
from typing import Any

import httpx
import pytest

from art_server.core.config import ServerConfig
from art_server.core.devices import DeviceError
from art_server.engine.vllm.engine import VLLMEngine
from art_server.engine.vllm.placement import parallel_sizes, plan_placement

from conftest import configuration_error, start_server
from rl import choice_item, sample, step
from test_vllm_real import MODEL, vllm_pid

TWO_CORES = len(os.sched_getaffinity(0)) >= 2
QUESTION = [{"role": "user", "content": "What is the password?"}]
TAUGHT = [{"messages": [*QUESTION, {"role": "assistant", "content": "Blue giraffe."}]}] * 4


# -- the rules ---------------------------------------------------------------------------------


@pytest.mark.fast
def test_parallel_sizes_are_read_from_vllm_args_in_both_spellings():
    assert parallel_sizes("--tensor-parallel-size 2 -dp=3 --enforce-eager") == {"tensor": 2, "pipeline": 1, "data": 3, "given": 2}
    assert parallel_sizes("") == {"tensor": 1, "pipeline": 1, "data": 1, "given": 0}
    with pytest.raises(DeviceError, match="--data-parallel-size needs a positive number, not 'x'"):
        parallel_sizes("--data-parallel-size x")


@pytest.mark.fast
@pytest.mark.skipif(not TWO_CORES, reason="needs two cores")
def test_cpu_cores_are_split_between_vllms_workers_and_training_elsewhere_is_dedicated():
    one = plan_placement("cpu:0", "", "cpu:1")
    assert one.env == {"VLLM_CPU_OMP_THREADS_BIND": "0-0"} and one.cores == (0,) and one.dedicated and one.workers == 1
    two = plan_placement("cpu:0-1", "--data-parallel-size 2", "")
    assert two.env == {"VLLM_CPU_OMP_THREADS_BIND": "0-0|1-1"} and not two.dedicated
    assert not plan_placement("cpu:0-1", "", "cpu:1").dedicated  # they share core 1
    assert plan_placement("cpu", "", "").env == {}  # not pinned: vLLM's own binding
    with pytest.raises(DeviceError, match="gives vLLM core\\(s\\) 0 for 2 workers"):
        plan_placement("cpu:0", "--tensor-parallel-size 2", "")


@pytest.mark.fast
@pytest.mark.skipif(not TWO_CORES, reason="needs two cores")
def test_vllm_does_not_sleep_for_a_step_that_trains_on_other_devices(tmp_path):
    base: dict[str, Any] = {"engine": "vllm", "vllm_sleep_mode": "auto"}
    shared = VLLMEngine(ServerConfig(**base), MODEL, tmp_path, "cuda", None)
    dedicated = VLLMEngine(ServerConfig(**base, inference_devices="cpu:0", train_devices="cpu:1"), MODEL, tmp_path, "cuda", None)
    assert shared.sleeps_for_training and not dedicated.sleeps_for_training


@pytest.mark.parametrize(
    "args, says",
    [
        (["--engine", "hf", "--inference-devices", "cpu:0"], "--inference-devices places vLLM"),
        (
            ["--engine", "vllm", "--inference-devices", "cuda:0"],
            "--inference-devices: cuda:0 does not exist (this machine has 0 CUDA",
        ),
        (["--engine", "vllm", "--inference-devices", "cpu:0-999"], "names core(s)"),
        (["--engine", "vllm", "--inference-devices", "gpu0"], "'gpu0' is not a device"),
        (["--engine", "vllm", "--inference-devices", "cpu:0", "--vllm-args=--tensor-parallel-size 2"], "for 2 workers"),
        (["--engine", "auto", "--inference-devices", "cpu:0"], "--engine auto is hf there"),
        (["--train-ranks", "2", "--train-devices", "cpu:0,cpu:0"], "share cores"),
        (["--train-ranks", "2", "--train-devices", "cpu:0,cpu"], "pin every CPU rank"),
    ],
)
def test_impossible_placements_are_one_line_errors(tmp_path, args, says):
    line = configuration_error(tmp_path / "data", "--base-model", "builtin:tiny", *args)
    assert says in line, line


# -- on vLLM's CPU build -----------------------------------------------------------------------


def real_vllm(test):
    """On vLLM's CPU build, with a core for each of two workers."""
    return pytest.mark.needs("vllm_cpu")(pytest.mark.skipif(not TWO_CORES, reason="needs two cores")(test))


def answers(client: httpx.Client, model: str, n: int) -> list[str]:
    def ask(_: int) -> str:
        r = client.post("/v1/chat/completions", json={"model": model, "messages": QUESTION, "max_tokens": 6, "temperature": 0})
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["content"]

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(ask, range(n)))


def requests_per_engine(client: httpx.Client) -> dict[str, float]:
    """vLLM's own count of finished requests per data-parallel engine (its Prometheus metrics)."""
    url = client.get("/v1/engine/stats").json()["url"]
    text = httpx.get(f"{url}/metrics", timeout=10).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"vllm:request_success_total\{(.*)\} ([0-9.e+]+)$", line)
        if m:
            engine = re.search(r'engine="(\d+)"', m.group(1))
            key = engine.group(1) if engine else "?"
            counts[key] = counts.get(key, 0.0) + float(m.group(2))
    return counts


def concurrent_group(client: httpx.Client, model: str, size: int) -> list[dict]:
    """`size` one-answer requests at once (so every replica gets some), as one group."""

    def one(i: int) -> dict:
        r = sample(client, model, QUESTION, 1, 8, seed=i)
        return {"messages_and_choices": [*QUESTION, choice_item(r, r["choices"][0])], "reward": float(i % 3)}

    with concurrent.futures.ThreadPoolExecutor(size) as pool:
        return list(pool.map(one, range(size)))


def served_as_trained(client: httpx.Client, name: str, base_model: str) -> tuple[float, float]:
    """Step 1 trains on answers of step 0; step 2 on 16 concurrent answers of step 1, whose first
    gradient step compares the trainer's logprobs under step 1's adapter with what vLLM sampled.
    Returns (that difference, how far step 1 moved a greedy token's logprob): a replica or a shard
    without step 1's adapter would show a difference as large as the move."""
    assert (
        client.post("/v1/art/models/register", json={"name": name, "project": "p", "base_model": base_model}).status_code == 200
    )
    step(client, name, [concurrent_group(client, name, 8)], learning_rate=5e-2)
    diff = step(client, name, [concurrent_group(client, name, 16)], learning_rate=5e-2)[-1]["metrics"]["sampler_logprob_diff_max"]
    greedy = [sample(client, f"{name}@{s}", QUESTION, 1, 4, temperature=0)["choices"][0] for s in (0, 1)]
    return diff, abs(greedy[0]["logprobs"]["content"][0]["logprob"] - greedy[1]["logprobs"]["content"][0]["logprob"])


@real_vllm
def test_two_data_parallel_replicas_both_serve_each_steps_adapter(tmp_path):
    """Two replicas (builtin:small, fp32, a worker per core): 16 concurrent answers of step 1, spread
    over both replicas (vLLM's metrics say so), score as the trainer scores them under step 1."""
    srv = start_server(
        tmp_path / "data",
        "--engine",
        "vllm",
        "--base-model",
        "builtin:small",
        "--dtype",
        "float32",
        "--inference-devices",
        "cpu:0-1",
        "--vllm-args=--data-parallel-size 2",
        timeout=600,
    )
    try:
        with srv.client(timeout=600) as c:
            before = requests_per_engine(c)
            diff, moved = served_as_trained(c, "dp", "builtin:small")
            after = requests_per_engine(c)
        log = (tmp_path / "data" / "logs" / "vllm.log").read_text()
    finally:
        srv.stop()
    print(f"data parallel 2: requests per replica {after}; step 1 served vs trained {diff:.2e}, step 1 moved {moved:.2e}")
    assert sorted(after) == ["0", "1"] and all(after[e] - before.get(e, 0) >= 2 for e in after), after
    assert "'data_parallel_size': 2" in log
    assert diff < 1e-3 and moved > 100 * diff


@real_vllm
def test_tensor_parallel_2_serves_each_step_as_the_trainer_scores_it(tmp_path):
    """Two tensor-parallel workers, one per core (vLLM's CPU build cannot bind 2 workers to this
    machine's one NUMA node by itself: --inference-devices binds them); builtin:small (8 heads;
    SmolLM2's 9 do not split in 2), fp32: both shards of each step's adapter are loaded."""
    srv = start_server(
        tmp_path / "data",
        "--engine",
        "vllm",
        "--base-model",
        "builtin:small",
        "--dtype",
        "float32",
        "--inference-devices",
        "cpu:0-1",
        "--vllm-args=--tensor-parallel-size 2",
        timeout=600,
    )
    try:
        with srv.client(timeout=600) as c:
            diff, moved = served_as_trained(c, "tp", "builtin:small")
        log = (tmp_path / "data" / "logs" / "vllm.log").read_text()
    finally:
        srv.stop()
    print(f"tensor parallel 2: step 1 served vs trained {diff:.2e}, step 1 moved a greedy logprob by {moved:.2e}")
    assert "'tensor_parallel_size': 2" in log and "local_rank=1, core ids=[1]" in log
    assert diff < 1e-3 and moved > 100 * diff


@real_vllm
def test_vllm_and_the_trainer_each_on_their_own_core(tmp_path):
    srv = start_server(
        tmp_path / "data",
        "--engine",
        "vllm",
        "--base-model",
        MODEL,
        "--inference-devices",
        "cpu:0",
        "--train-devices",
        "cpu:1",
        timeout=600,
    )
    try:
        with srv.client(timeout=600) as c:
            vllm = vllm_pid(c)
            tree = [
                vllm,
                *map(int, subprocess.run(["pgrep", "-g", str(os.getpgid(vllm))], capture_output=True, text=True).stdout.split()),
            ]
            assert {frozenset(os.sched_getaffinity(p)) for p in tree} == {frozenset({0})}, tree
            assert os.sched_getaffinity(srv.process.pid) == {1}
            assert c.post("/v1/art/models/register", json={"name": "own", "project": "p", "base_model": MODEL}).status_code == 200
            step(c, "own", TAUGHT, path="train_sft", learning_rate=3e-3, epochs=8, batch_size=4)
            assert answers(c, "own", 2) == ["Blue giraffe."] * 2
        log = (tmp_path / "data" / "logs" / "vllm.log").read_text()
        assert "VLLM_CPU_OMP_THREADS_BIND='0-0'" in log and "core ids=[0]" in log
        assert any("training in this process is pinned to core(s) 1" in line for line in srv.stderr_lines)
    finally:
        srv.stop()
