"""Data-parallel training on torch.distributed (gloo, CPU): a server with 2 trainer ranks against the
single-process server on the same batch; a rank that errors, dies or hangs; bad configurations;
two "nodes" (separate process trees joined over 127.0.0.1); and the learning test on 2 ranks.

Over 400 lines: its tests share a 2-rank server (starting the ranks is most of their cost).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from safetensors.torch import load_file
from test_learning import single_turn_rises
from test_training import register

from conftest import ServerProcess, configuration_error, start_server
from rl import board_prompt, choice_item, sample, step

PROMPTS = [board_prompt(b) for b in ("X . .\n. O .\n. . .", ". . .\n. . .\n. . .", "X O X\n. . .\nO . .")]
LR = float(os.environ.get("LRX", "1e-3"))  # one step moves the adapter ~1000x the 1e-6 the ranks may differ by


def adapter(client: httpx.Client, name: str, step_number: int) -> dict:
    folders = {c["step"]: c["path"] for c in client.get(f"/v1/art/models/{name}/checkpoints").json()["checkpoints"]}
    return load_file(str(Path(folders[step_number]) / "adapter_model.safetensors"))


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def groups_from(client: httpx.Client, model: str) -> list[list[dict]]:
    """Three groups of 6 of different lengths (so the ranks' shards differ), rewards by answer length."""
    register(client, model)
    groups = []
    for g, messages in enumerate(PROMPTS):
        r = sample(client, model, messages, 6, 4 + 3 * g, seed=g)
        groups.append(
            [
                {"messages_and_choices": [*messages, choice_item(r, c)], "reward": float(len(c["token_ids"]) % 3 + i % 2)}
                for i, c in enumerate(r["choices"])
            ]
        )
    return groups


CONVERSATIONS = [
    {"messages": [{"role": "user", "content": f"Say {w}."}, {"role": "assistant", "content": f"{w} {w}!"}]}
    for w in ("apple", "pear", "plum", "fig", "kiwi", "lime", "date")
]


def ranks_server(data: Path, *args: str, env: dict[str, str] | None = None) -> ServerProcess:
    return start_server(data, "--base-model", "builtin:tiny", "--train-ranks", "2", *args, env=env)


def workers_of(srv: ServerProcess) -> list[int]:
    out = subprocess.run(["pgrep", "-f", "art_server.trainer.rank_worker"], capture_output=True, text=True).stdout.split()
    return [
        int(p)
        for p in out
        if (Path(f"/proc/{p}/status").exists() and f"PPid:\t{srv.process.pid}" in Path(f"/proc/{p}/status").read_text())
    ]


def failed_step(client: httpx.Client, name: str, groups: list[list[dict]]) -> dict:
    """Posts a step expected to fail after it started; returns its error line."""
    with client.stream("POST", f"/v1/art/models/{name}/train", json={"groups": groups, "config": {"learning_rate": LR}}) as r:
        assert r.status_code == 200, r.read()
        lines = [json.loads(line) for line in r.iter_lines() if line.strip()]
    assert lines[-1]["type"] == "error", lines[-1]
    return lines[-1]


@pytest.fixture(scope="module")
def one_more(tmp_path_factory, tiny_path):
    srv = start_server(tmp_path_factory.mktemp("one-more-data"), "--base-model", "builtin:tiny")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, tiny_path):
    srv = ranks_server(tmp_path_factory.mktemp("ranks-data"))
    yield srv
    srv.stop()


def trained_on_both(
    one: httpx.Client, two: httpx.Client, name: str, path: str, data: list, **config
) -> tuple[dict, dict, dict, list]:
    """Registers `name` on both servers, trains one step on each; returns the adapters before and after
    (one process, two ranks) and the two results' metrics."""
    results = []
    for c in (one, two):
        register(c, name)
        results.append(step(c, name, data, path=path, **config)[-1]["metrics"])
    return adapter(one, name, 0), adapter(one, name, 1), adapter(two, name, 1), results


def test_a_grpo_step_on_two_ranks_equals_one_process(server, two_ranks):
    """Same groups, same seed, fp32: the ranks split the sequences, yet the adapter is the single
    process's within 1e-6 while the step moved it ~1000x that."""
    with server.client() as one, two_ranks.client() as two:
        groups = groups_from(one, "dp-sampler")
        before, after_one, after_two, results = trained_on_both(
            one, two, "dp-grpo", "train", groups, learning_rate=LR, micro_batch_size=4
        )
    print(f"GRPO: adapter moved {max_diff(before, after_one):.2e}; 1 vs 2 ranks differ by {max_diff(after_one, after_two):.2e}")
    assert max_diff(before, after_one) > 5e-4
    assert max_diff(after_one, after_two) < 1e-6
    for key in ("loss", "grad_norm", "tokens_trained", "importance_ratio_max", "entropy", "sampler_logprob_diff_max"):
        assert results[1][key] == pytest.approx(results[0][key], rel=1e-5, abs=1e-7), key


def test_an_sft_step_on_two_ranks_equals_one_process(server, two_ranks):
    with server.client() as one, two_ranks.client() as two:
        before, after_one, after_two, results = trained_on_both(
            one, two, "dp-sft", "train_sft", CONVERSATIONS, learning_rate=LR, epochs=1, batch_size=7, micro_batch_size=2
        )
    print(f"SFT: adapter moved {max_diff(before, after_one):.2e}; 1 vs 2 ranks differ by {max_diff(after_one, after_two):.2e}")
    assert max_diff(before, after_one) > 5e-4
    assert max_diff(after_one, after_two) < 1e-6
    assert results[1]["loss"] == pytest.approx(results[0]["loss"], rel=1e-6)


@pytest.mark.parametrize("path", ["train", "train_sft"])
def test_many_optimizer_steps_on_two_ranks_differ_from_one_process_only_by_summation_order(server, two_ranks, one_more, path):
    """With several optimizer steps (GRPO gradient_steps 2; SFT 2 epochs of 2 batches) Adam divides
    by sqrt(v) + 1e-8: a gradient element near 1e-8 turns a float rounding difference into a visible
    one. The bar: 2 ranks are as close to one process as one process is to itself when only the
    order of the sums changes (micro-batches of 1 instead of 4)."""
    with server.client() as one, two_ranks.client() as two:
        data = groups_from(one, "dp-sampler") if path == "train" else CONVERSATIONS
        config = {"learning_rate": LR, **({"gradient_steps": 2} if path == "train" else {"epochs": 2, "batch_size": 4})}
        _, after_one, after_two, _ = trained_on_both(one, two, f"dp-many-{path}", path, data, micro_batch_size=4, **config)
    with one_more.client() as other:  # the same name, so the same initial adapter
        register(other, f"dp-many-{path}")
        step(other, f"dp-many-{path}", data, path=path, micro_batch_size=1, **config)
        reordered = adapter(other, f"dp-many-{path}", 1)
    floor, ranks = max_diff(after_one, reordered), max_diff(after_one, after_two)
    print(f"{path}: 1 process vs itself reordered {floor:.2e}; 1 vs 2 ranks {ranks:.2e}")
    assert ranks <= 4 * floor + 1e-7


def test_a_rank_that_dies_fails_the_step_rolls_back_and_the_next_step_restarts_it(tmp_path, tiny_path):
    """Rank 1 exits (like kill -9) right after it receives step 1: the step fails within seconds with
    rank_failed, nothing is committed, and step 1 then trains on restarted workers; the server killed
    with -9 then takes its worker with it."""
    srv = ranks_server(tmp_path / "data", env={"ART_FAULT": "rank1_exit"})
    try:
        with srv.client() as c:
            register(c, "dies")
            groups = groups_from(c, "dies")
            started = time.monotonic()
            error = failed_step(c, "dies", groups)
            print(f"rank 1 died: the step failed after {time.monotonic() - started:.2f} s: {error['error']['message']}")
            assert time.monotonic() - started < 30
            assert error["error"]["code"] == "rank_failed" and error["status"] == 503, error
            assert "rank 1" in error["error"]["message"] and "rolled back" in error["error"]["message"], error
            assert [k["step"] for k in c.get("/v1/art/models/dies/checkpoints").json()["checkpoints"]] == [0]
            first_worker = workers_of(srv)
            lines = step(c, "dies", groups, learning_rate=LR)
            assert lines[-1]["step"] == 1
            assert workers_of(srv) and workers_of(srv) != first_worker
            assert any("restarting the trainer ranks" in line for line in srv.stderr_lines)
            ranks = c.get("/v1/engine/stats").json()["trainer_ranks"]
            assert ranks["world"] == 2 and ranks["restarts"] == 1 and ranks["broken"] is None, ranks
            assert [w["alive"] for w in ranks["workers"].values()] == [True] and ranks["devices"] == ["cpu", "cpu"], ranks
        # The server killed with -9 takes its (restarted) worker with it.
        [worker] = workers_of(srv)
        srv.process.send_signal(signal.SIGKILL)
        srv.process.wait()
        deadline = time.monotonic() + 10
        while (
            time.monotonic() < deadline
            and Path(f"/proc/{worker}").exists()
            and "zombie" not in Path(f"/proc/{worker}/status").read_text()
        ):
            time.sleep(0.1)
        assert not Path(f"/proc/{worker}").exists() or "zombie" in Path(f"/proc/{worker}/status").read_text()
    finally:
        srv.stop()


def test_an_error_on_a_rank_rolls_every_rank_back_and_a_killed_idle_rank_is_replaced(tmp_path, tiny_path):
    srv = ranks_server(tmp_path / "data", env={"ART_FAULT": "rank1_step_error"})
    try:
        with srv.client() as c:
            register(c, "errs")
            groups = groups_from(c, "errs")
            error = failed_step(c, "errs", groups)
            print(f"an error on rank 1: {error['status']} {error['error']['message']}")
            assert error["error"]["code"] == "rank_failed" and "injected fault on rank 1" in error["error"]["message"], error
            # The worker lived through it (an error, not a lost rank): the next step trains on it.
            worker = workers_of(srv)
            assert step(c, "errs", groups, learning_rate=LR)[-1]["step"] == 1
            assert workers_of(srv) == worker
            # A worker killed while idle is replaced before the next step, which then trains.
            os.kill(worker[0], signal.SIGKILL)
            time.sleep(0.5)
            assert step(c, "errs", groups, learning_rate=LR)[-1]["step"] == 2
            assert workers_of(srv) and workers_of(srv) != worker
    finally:
        srv.stop()
    time.sleep(1)
    assert not workers_of(srv)


def test_a_rank_that_stops_answering_fails_the_step_within_the_rank_timeout(tmp_path, tiny_path):
    # 10 s: the restarted worker loads the base model inside its first step, and that counts against
    # the rank timeout (4 s failed that step on a loaded 2-core machine).
    srv = ranks_server(tmp_path / "data", "--train-rank-timeout", "10")
    try:
        with srv.client() as c:
            register(c, "hangs")
            groups = groups_from(c, "hangs")
            [worker] = workers_of(srv)
            os.kill(worker, signal.SIGSTOP)
            started = time.monotonic()
            error = failed_step(c, "hangs", groups)
            took = time.monotonic() - started
            print(f"rank 1 stopped (SIGSTOP), rank timeout 10 s: the step failed after {took:.2f} s: {error['error']['message']}")
            assert error["error"]["code"] == "rank_failed" and "stopped answering" in error["error"]["message"], error
            assert took < 30, took
            assert step(c, "hangs", groups, learning_rate=LR)[-1]["step"] == 1  # on a restarted worker
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "args, says",
    [
        (["--train-ranks", "3"], "3 CPU ranks on this machine, which has"),
        (["--train-ranks", "2", "--train-devices", "cuda:0,cuda:1"], "cuda:0 does not exist"),
        (["--train-ranks", "2", "--train-devices", "cpu"], "names 1 device(s) for 2 rank(s)"),
        (["--train-ranks", "0"], "--train-ranks 0"),
        (["--train-ranks", "2", "--train-local-ranks", "1"], "set --train-master-port"),
    ],
)
def test_impossible_rank_configurations_are_one_line_errors(tmp_path, args, says):
    started = time.monotonic()
    line = configuration_error(tmp_path / "data", "--base-model", "builtin:tiny", *args)
    assert says in line, line
    assert time.monotonic() - started < 30


def test_a_rendezvous_that_never_completes_is_a_configuration_error_in_seconds(tmp_path, tiny_path):
    port = free_port()
    started = time.monotonic()
    line = configuration_error(
        tmp_path / "data",
        "--base-model",
        "builtin:tiny",
        "--train-ranks",
        "2",
        "--train-local-ranks",
        "1",
        "--train-master-port",
        str(port),
        "--train-rendezvous-timeout",
        "3",
    )
    print(f"rendezvous timeout 3 s: exit 78 after {time.monotonic() - started:.2f} s: {line}")
    assert "rank(s) 1 of 2 did not join within 3 s" in line and f"MASTER_PORT={port}" in line, line
    assert time.monotonic() - started < 30


def test_ranks_of_different_versions_are_refused_at_start(tmp_path, tiny_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "art_server",
            "--data-dir",
            str(tmp_path / "data"),
            "--port",
            "0",
            "--base-model",
            "builtin:tiny",
            "--train-ranks",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ART_FAULT": "rank_version_mismatch"},
    )
    assert result.returncode == 78, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "ranks of different versions" in last and "rank 1 runs art-server 0.0.0-mismatch" in last, last


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_over_loopback_train_like_one_process(server, tmp_path, tiny_path):
    """The README's multi-node commands, with 127.0.0.1 for the head node's address: the server
    (node 0, rank 0) waits for rank 1, which a separate process tree starts as a user would on node 1."""
    port = free_port()
    node1_env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    node1 = None
    try:
        # The head waits for rank 1 before it is ready, so rank 1 starts first here (it retries until the store is up).
        node1 = subprocess.Popen(
            [sys.executable, "-m", "art_server.trainer.rank_worker", "--device", "cpu", "--threads", "1"],
            env=node1_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        head = start_server(
            tmp_path / "head",
            "--base-model",
            "builtin:tiny",
            "--train-ranks",
            "2",
            "--train-local-ranks",
            "1",
            "--train-master-addr",
            "127.0.0.1",
            "--train-master-port",
            str(port),
        )
        try:
            with server.client() as one, head.client() as two:
                config = {"learning_rate": LR, "epochs": 1, "batch_size": 7}
                for c in (one, two):
                    register(c, "nodes")
                result = step(two, "nodes", CONVERSATIONS, path="train_sft", **config)[-1]
                step(one, "nodes", CONVERSATIONS, path="train_sft", **config)
                assert max_diff(adapter(one, "nodes", 1), adapter(two, "nodes", 1)) < 1e-6
                assert result["step"] == 1
                # The new step is served by the head node at once.
                assert "nodes@1" in [m["id"] for m in two.get("/v1/models").json()["data"]]
        finally:
            head.stop()
        assert node1.wait(timeout=20) == 0  # rank 1 leaves when the head says stop
    finally:
        if node1 is not None and node1.poll() is None:
            node1.kill()


@pytest.mark.parametrize("seed", [0])  # seeds 0 and 1 rose in each of 3 runs; one is enough here
def test_single_turn_reward_rises_on_two_ranks(two_ranks, seed):
    single_turn_rises(two_ranks, f"learn-{seed}", seed, "2 ranks, single-turn")


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, tiny_path):
    srv = ranks_server(tmp_path_factory.mktemp("sharded-data"), "--train-shard-base")
    yield srv
    srv.stop()


def test_a_sharded_base_holds_half_its_layers_per_rank_and_trains_like_one_process(server, sharded, one_more):
    """--train-shard-base (FSDP2): rank 0 holds half of the decoder layers' elements, and GRPO and SFT
    steps train like one process. The batches are uneven on purpose (3 trajectories, micro-batches
    of 1; 7 conversations, micro-batches of 3): the rank with fewer micro-batches runs passes that
    train nothing, so the ranks' all-gathers stay in step (out of step they would time out). Loss and
    gradient norm are the single process's to 1e-6; the adapter is as close to it as one process is
    to itself with its sums in another order (Adam magnifies float rounding in gradients near 1e-8)."""
    with server.client() as one, sharded.client() as two, one_more.client() as other:
        groups = [groups_from(one, "dp-sampler")[0][:3]]
        before, after_one, after_two, results = trained_on_both(
            one, two, "shard-grpo", "train", groups, learning_rate=LR, micro_batch_size=1
        )
        _, sft_one, sft_two, sft = trained_on_both(
            one, two, "shard-sft", "train_sft", CONVERSATIONS, learning_rate=LR, epochs=1, batch_size=7, micro_batch_size=3
        )
        register(other, "shard-grpo")
        step(other, "shard-grpo", groups, learning_rate=LR, micro_batch_size=3)
        reordered = adapter(other, "shard-grpo", 1)
        ranks = two.get("/v1/engine/stats").json()["trainer_ranks"]
    grpo, floor = max_diff(after_one, after_two), max_diff(after_one, reordered)
    print(
        f"sharded base: rank 0 holds {ranks['sharded_elements_here']} of {ranks['sharded_elements']} decoder-layer "
        f"elements ({ranks['base_elements']} in the whole base); GRPO moved {max_diff(before, after_one):.2e}, 1 process vs "
        f"sharded {grpo:.2e} (1 process reordered {floor:.2e}); SFT {max_diff(sft_one, sft_two):.2e}"
    )
    assert ranks["shard_base"] and ranks["sharded_elements_here"] == pytest.approx(ranks["sharded_elements"] / 2, rel=0.01)
    assert max_diff(before, after_one) > 5e-4 and grpo <= 4 * floor + 1e-7 and max_diff(sft_one, sft_two) < 1e-6
    for key in ("loss", "grad_norm", "tokens_trained", "sampler_logprob_diff_max"):
        assert results[1][key] == pytest.approx(results[0][key], rel=1e-6, abs=1e-9), key
    assert sft[1]["loss"] == pytest.approx(sft[0]["loss"], rel=1e-6)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--train-shard-base"], "--train-shard-base shards the base model across trainer ranks: set --train-ranks 2"),
    ],
)
def test_sharding_without_ranks_is_a_one_line_error(tmp_path, args, says):
    assert says in configuration_error(tmp_path / "data", "--base-model", "builtin:tiny", *args)


def test_a_sharded_base_that_loses_a_rank_rolls_back_and_says_to_restart_while_serving_goes_on(tmp_path, tiny_path):
    """With the base sharded, a rank cannot leave a pass to report an error (the others wait for its
    shard of the weights): it leaves the group, the step rolls back, and since this process's sharded
    model belongs to the lost group, later steps say to restart the server; serving is unaffected."""
    srv = ranks_server(tmp_path / "data", "--train-shard-base", env={"ART_FAULT": "rank1_step_error"})
    try:
        with srv.client() as c:
            register(c, "lost")
            groups = groups_from(c, "lost")
            started = time.monotonic()
            first = failed_step(c, "lost", groups)
            took = time.monotonic() - started
            second = failed_step(c, "lost", groups)
            chat = c.post(
                "/v1/chat/completions", json={"model": "lost", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            )
            steps = [k["step"] for k in c.get("/v1/art/models/lost/checkpoints").json()["checkpoints"]]
        print(f"sharded base, rank 1 fails: 503 after {took:.2f} s: {first['error']['message']}")
        assert first["error"]["code"] == "rank_failed" and "rank 1" in first["error"]["message"] and took < 60, first
        assert second["error"]["code"] == "rank_failed" and "restart the server" in second["error"]["message"], second
        assert chat.status_code == 200 and steps == [0] and srv.process.poll() is None
    finally:
        srv.stop()


def test_a_refused_update_on_rank_0_rolls_every_rank_back_and_the_next_step_is_a_clean_runs(server, tmp_path, tiny_path):
    """An error where rank 0 applies gradient step 2 (after gradient step 1 changed every rank's
    weights, as a non-finite loss would be refused there): the step fails and rolls back; the next
    step, on the same workers, gives the adapter a clean single-process run gives."""
    srv = ranks_server(tmp_path / "data", env={"ART_FAULT": "gradient_step:2"})
    try:
        with srv.client() as c, server.client() as one:
            groups = groups_from(one, "dp-sampler")
            register(c, "refused")
            with c.stream(
                "POST",
                "/v1/art/models/refused/train",
                json={"groups": groups, "config": {"learning_rate": LR, "gradient_steps": 2}},
            ) as r:
                last = [json.loads(line) for line in r.iter_lines() if line.strip()][-1]
            assert last["type"] == "error" and "injected fault at gradient_step:2" in last["error"]["message"], last
            worker = workers_of(srv)
            step(c, "refused", groups, learning_rate=LR, gradient_steps=2)
            assert workers_of(srv) == worker  # the same workers, no restart
            register(one, "refused")
            step(one, "refused", groups, learning_rate=LR, gradient_steps=2)
            diff = max_diff(adapter(c, "refused", 1), adapter(one, "refused", 1))
        print(f"after a refused update: next step vs a clean single-process run {diff:.2e}")
        assert diff < 1e-5
    finally:
        srv.stop()


def test_a_kl_penalty_to_an_earlier_step_reaches_every_rank(server, two_ranks):
    """kl_ref_step's adapter travels with the step: on 2 ranks the KL to step 1 right after step 1
    is 0, as in one process (a rank scoring against the base model would make it positive)."""
    with server.client() as one, two_ranks.client() as two:
        groups = groups_from(one, "dp-sampler")
        lines = []
        for c in (one, two):
            register(c, "dp-klref")
            step(c, "dp-klref", groups, learning_rate=LR)
            lines.append(step(c, "dp-klref", groups, learning_rate=LR, kl_coef=0.5, kl_ref_step=1))
    first = [next(line for line in ls if line["type"] == "progress") for ls in lines]
    assert first[0]["kl_ref"] == 0.0 and first[1]["kl_ref"] == 0.0, first
    assert first[1]["loss"] == pytest.approx(first[0]["loss"], rel=1e-5, abs=1e-9)
