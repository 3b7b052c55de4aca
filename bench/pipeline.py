"""`npm run bench:pipeline`: the cookbook's tic-tac-toe notebook, run by the real kernel (nbclient) up
to and including its training cell, once per `maxStepsOffPolicy` (0 = the synchronous loop, then 1
and 2), same seed, same steps, same groups. Prints a table and writes the raw data.

Per run: wall time of the training cell (trainLoop's own clock), steps per hour, how busy each stage
was (training rollouts running, a step training, both at once), the reward reached by equal wall
time, and the greedy evaluation before and after. From the synchronous run's phase times it also
says what overlap could buy where serving and training run on separate devices.

Raw data: .artifacts/bench/pipeline-<engine>-<steps>-steps.json (and each executed notebook beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".artifacts" / "bench"
MARK = "BENCH_RESULT "
TRAINING_CELL = "const run = await trainLoop"


def notebook_until_training() -> nbformat.NotebookNode:
    """tictactoe.ipynb up to its training cell, plus one cell that prints what the bench reads."""
    nb = nbformat.read(ROOT / "notebooks" / "tictactoe.ipynb", as_version=4)
    end = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and TRAINING_CELL in c.source)
    nb.cells = nb.cells[: end + 1]
    nb.cells.append(
        nbformat.v4.new_code_cell(
            f'console.log("{MARK}" + JSON.stringify({{ seconds: run.seconds, pipeline: run.pipeline, history: run.history }}));'
        )
    )
    return nb


def run_once(k: int, steps: int, eval_games: int, eval_every: int, engine: str) -> dict:
    nb = notebook_until_training()
    env = {
        "ART_STEPS": str(steps),
        "ART_MAX_STEPS_OFF_POLICY": str(k),
        "ART_EVAL_GAMES": str(eval_games),
        "ART_EVAL_EVERY": str(eval_every),
        "ART_ENGINE": engine,
    }
    saved = {key: os.environ.get(key) for key in [*env, "ART_SMOKE"]}
    os.environ.update(env)
    os.environ.pop("ART_SMOKE", None)
    started = time.time()
    try:
        nbclient.NotebookClient(
            nb, kernel_name="art-typescript", timeout=3600, resources={"metadata": {"path": str(ROOT / "notebooks")}}
        ).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        nbformat.write(nb, OUT / f"pipeline-{engine}-k{k}.ipynb")
    text = "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []))
    result = json.loads(text[text.index(MARK) + len(MARK) :].splitlines()[0])
    result["notebook_seconds"] = time.time() - started
    return result


def summarize(k: int, result: dict, equal_wall: float | None) -> dict:
    p, rows = result["pipeline"], result["history"]
    train = sorted((r for r in rows if r["split"] == "train"), key=lambda r: r["step"])
    val = sorted((r for r in rows if r["split"] == "val"), key=lambda r: r["step"])
    wall = result["seconds"]
    start = min(r["time"] for r in rows)
    # A train row's time is when its step's request reached the server (its rollouts were gathered).
    by_equal = [r["reward"] for r in train if equal_wall is None or r["time"] - start <= equal_wall]
    return {
        "k": k,
        "wall_s": wall,
        "steps": len(train),
        "steps_per_hour": len(train) / wall * 3600,
        "rollout_busy": p["rolloutSeconds"] / wall,
        "train_busy": p["trainSeconds"] / wall,
        "overlap": p["overlapSeconds"] / wall,
        "eval_s": p["evalSeconds"],
        "stale_dropped": p["staleDropped"],
        "reward_last4_by_equal_wall": statistics.fmean(by_equal[-4:]) if by_equal else float("nan"),
        "val_first": val[0]["reward"] if val else float("nan"),
        "val_last": val[-1]["reward"] if val else float("nan"),
        "val_win_last": val[-1].get("win", float("nan")) if val else float("nan"),
        "val_illegal_last": val[-1].get("illegal", float("nan")) if val else float("nan"),
        "policy_lag_max": max((r.get("policyLagMax", 0) for r in train), default=0),
        "rollout_s_sync": p["rolloutSeconds"],
        "train_s": p["trainSeconds"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--ks", default="0,1,2", help="maxStepsOffPolicy values to compare (0 = synchronous)")
    parser.add_argument("--eval-games", type=int, default=16)
    parser.add_argument("--engine", default="auto", help="the notebook's engine parameter: auto (hf on a CPU), hf or vllm")
    parser.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (default: only at the first and last)")
    a = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    ks = [int(k) for k in a.ks.split(",")]
    raw = {}
    for k in ks:
        print(f"[bench] tictactoe, maxStepsOffPolicy {k}: {a.steps} steps ...", flush=True)
        raw[k] = run_once(k, a.steps, a.eval_games, a.eval_every or a.steps, a.engine)
        print(f"[bench]   trainLoop {raw[k]['seconds']:.0f} s (notebook {raw[k]['notebook_seconds']:.0f} s)", flush=True)
    equal_wall = min(r["seconds"] for r in raw.values())
    rows = [summarize(k, raw[k], equal_wall) for k in ks]
    sync = next((r for r in rows if r["k"] == 0), rows[0])
    print(
        f"\ntictactoe.ipynb, {a.steps} steps, engine {a.engine} ({os.cpu_count()} cores; the notebook's defaults otherwise; evaluation "
        f"{a.eval_games} greedy games at step 0 and every {a.eval_every or a.steps})"
    )
    print(
        f"{'k':>2} {'wall s':>7} {'speed-up':>8} {'steps/h':>8} {'rollouts busy':>13} {'training busy':>13} {'both':>6} "
        f"{f'reward @ {equal_wall:.0f} s':>15} {'val first->last':>16} {'max lag':>7}"
    )
    for r in rows:
        print(
            f"{r['k']:>2} {r['wall_s']:>7.0f} {sync['wall_s'] / r['wall_s']:>7.2f}x {r['steps_per_hour']:>8.0f} "
            f"{r['rollout_busy']:>12.0%} {r['train_busy']:>13.0%} {r['overlap']:>6.0%} {r['reward_last4_by_equal_wall']:>15.3f} "
            f"{r['val_first']:>7.3f}->{r['val_last']:<7.3f} {r['policy_lag_max']:>7}  (last val: win {r['val_win_last']:.2f}, illegal {r['val_illegal_last']:.2f})"
        )
    # Where serving and training each have their own device, a step costs max(rollouts, training)
    # instead of their sum (the synchronous run's phase times, per step).
    if any(r["k"] == 0 for r in rows):
        per_step_rollout = sync["rollout_s_sync"] / max(1, sync["steps"])
        per_step_train = sync["train_s"] / max(1, sync["steps"])
        bound = (per_step_rollout + per_step_train) / max(per_step_rollout, per_step_train)
        print(
            f"\nSynchronous phases per step: rollouts {per_step_rollout:.1f} s, training {per_step_train:.1f} s: on separate "
            f"devices overlap could make a step at most {bound:.2f}x faster (sum / max)."
        )
    out = OUT / f"pipeline-{a.engine}-{a.steps}-steps.json"
    out.write_text(
        json.dumps(
            {
                "steps": a.steps,
                "engine": a.engine,
                "eval_games": a.eval_games,
                "eval_every": a.eval_every or a.steps,
                "summary": rows,
                "raw": {str(k): v for k, v in raw.items()},
            },
            indent=2,
        )
    )
    print(f"raw data: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
