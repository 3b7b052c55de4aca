// The training pipeline (trainPipeline, under trainLoop) on a real server: maxStepsOffPolicy 0 is
// the synchronous loop, 1 learns with its staleness bounded (measured by the server from each
// turn's policy step), stale groups are dropped or retried and counted, evaluations are pinned to
// their step, and a stop (signal, rollout errors, a closed backend) leaves the server idle at a
// committed step.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import {
  BackendClosedError, gatherTrajectoryGroups, GatherError, type HistoryRow, LocalBackend, type PipelineResult, StoppedError, TrainableModel, trainLoop, trainPipeline,
  Trajectory, TrajectoryGroup,
} from "../../../lib/index";
import { randomBoard, rng, rollout } from "../../../examples/toy-task";

const EngineLoad = z.object({ pending: z.number(), running: z.number() }).passthrough();
const Info = z.object({ step: z.number(), training: z.boolean() }).passthrough();

/** The groups of a step of the toy task: `groups` boards, `size` rollouts each, seeded by step. */
function toyGroups(model: TrainableModel, seed: number, groups = 4, size = 8) {
  return (step: number) => Array.from({ length: groups }, (_, g) => {
    const board = randomBoard(rng(seed * 1_000_003 + step * 101 + g));
    return new TrajectoryGroup(Array.from({ length: size }, (_, i) => () => rollout(model, board, step * 1000 + g * 10 + i)));
  });
}

function errorText(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.stack ?? error.message}` : String(error);
}

/**
 * Runs a test's body; what it throws is rethrown as a plain Error that names it: node's runner shows
 * an ArtError (or an assertion carrying one) as `{}`, which says nothing about what went wrong.
 */
async function named(body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (error) {
    throw new Error(errorText(error));
  }
}

function trainRows(rows: HistoryRow[]): HistoryRow[] {
  return rows.filter((r) => r.split === "train").sort((a, b) => a.step - b.step);
}

describe("trainPipeline", () => {
  let backend: LocalBackend;

  before(async () => {
    backend = await LocalBackend.start({ dataDir: fs.mkdtempSync(path.join(os.tmpdir(), "art-pipeline-")), baseModel: "builtin:tiny", engine: "hf", device: "cpu" });
  });
  after(async () => {
    await backend?.close();
  });

  async function fresh(name: string, options: { gpuCostPerHourUsd?: number } = {}): Promise<TrainableModel> {
    const model = new TrainableModel({ name, project: "pipeline-tests", baseModel: "builtin:tiny", ...options });
    await model.register(backend);
    return model;
  }

  /** Nothing runs on the server and the model is not training, and it stays so for a while. */
  async function assertIdle(model: TrainableModel): Promise<void> {
    const deadline = Date.now() + 3000;
    let load = await backend.request("GET", "/v1/engine/stats", EngineLoad);
    while ((load.running || load.pending) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      load = await backend.request("GET", "/v1/engine/stats", EngineLoad);
    }
    const info = await backend.request("GET", `/v1/art/models/${model.name}`, Info);
    assert.deepEqual({ running: load.running, pending: load.pending, training: info.training }, { running: 0, pending: 0, training: false });
    await new Promise((r) => setTimeout(r, 1500));
    const later = await backend.request("GET", "/v1/engine/stats", EngineLoad);
    const laterInfo = await backend.request("GET", `/v1/art/models/${model.name}`, Info);
    assert.deepEqual({ running: later.running, pending: later.pending, step: laterInfo.step, training: laterInfo.training },
      { running: 0, pending: 0, step: info.step, training: false }, "something still ran after the pipeline stopped");
    // A committed step: the history holds one train row per step below it, and its checkpoint serves.
    assert.equal(trainRows(await model.historyRows()).length, info.step);
  }

  it("maxStepsOffPolicy 0 is the synchronous loop: the same rewards and losses as gather-then-train by hand", { timeout: 120_000 }, async () => {
    const byHand = await fresh("sync-hand");
    const groupsA = toyGroups(byHand, 3, 2, 4);
    const handLosses: number[] = [];
    const handRewards: number[] = [];
    for (let step = 0; step < 3; step++) {
      const gathered = await gatherTrajectoryGroups(groupsA(step), { progress: false, concurrency: 1 });
      handRewards.push(gathered.flatMap((g) => g.trajectories).reduce((s, t) => s + t.reward, 0) / 8);
      handLosses.push((await byHand.train(gathered, { learningRate: 1e-2, progress: false })).metrics.loss as number);
    }
    const piped = await fresh("sync-pipe");
    const rewards: number[] = [];
    const losses: number[] = [];
    const run = await trainPipeline({
      model: piped, steps: 3, groups: toyGroups(piped, 3, 2, 4), train: { learningRate: 1e-2 }, concurrency: 1,
      onStep: (e) => {
        if (e.type === "train") {
          rewards.push(e.reward);
          losses.push(e.result?.metrics.loss as number);
        }
      },
    });
    assert.equal(run.stepsTrained, 3);
    assert.deepEqual(rewards, handRewards);
    assert.deepEqual(losses, handLosses);
    assert.equal(run.overlapSeconds, 0, "a synchronous loop never trains while rollouts run");
    // Steps that trained something say how stale they were: not at all.
    const lags = trainRows(await piped.historyRows()).map((r) => r.policyLagMax).filter((lag) => lag !== undefined);
    assert.ok(lags.length > 0 && lags.every((lag) => lag === 0), `policy lag per step ${lags.join(",")}`);
  });

  it("a trajectory that never sampled keeps its reward in its group's baseline; plain messages train with allowTrainingWithoutLogprobs", { timeout: 120_000 }, () => named(async () => {
    const model = await fresh("baseline");
    const board = randomBoard(rng(11));
    // Each group: one agent that gave up before calling the model (reward 1, nothing sampled), three that sampled.
    const idle = () => Promise.resolve(Object.assign(new Trajectory({ messagesAndChoices: [{ role: "user", content: "hi" }] }), { reward: 1 }));
    const groups = (step: number) => [0, 1].map((g) => new TrajectoryGroup([idle, ...[0, 1, 2].map((i) => () => rollout(model, board, step * 100 + g * 10 + i))]));
    await trainPipeline({ model, steps: 1, groups, train: { learningRate: 1e-2 }, concurrency: 1 });
    const [row] = trainRows(await model.historyRows());
    // The server saw all 8 (it was sent only the 6 that sampled, whose rewards were then mostly flat).
    assert.equal(row?.trajectories, 8, JSON.stringify(row));
    assert.equal(row?.groupsTrained, 2, JSON.stringify(row));
    // Offline logs (plain assistant messages, no sampled choice) train through the loop when asked.
    const offline = await fresh("offline-loop");
    const log = (cell: string, reward: number) => () => Promise.resolve(Object.assign(new Trajectory({
      messagesAndChoices: [{ role: "user", content: "Name a cell." }, { role: "assistant", content: cell }] }), { reward }));
    await trainPipeline({ model: offline, steps: 1, groups: () => [new TrajectoryGroup([log("B2", 1), log("A1", 0)])],
      train: { learningRate: 1e-2, allowTrainingWithoutLogprobs: true }, concurrency: 1 });
    const [trained] = trainRows(await offline.historyRows());
    assert.equal(trained?.unsampledTrajectoriesTrained, 2, JSON.stringify(trained));
  }));

  it("maxStepsOffPolicy 1 learns the toy task; no trained token is more than 1 step behind, and the stages overlap", { timeout: 300_000 }, async () => {
    const model = await fresh("async-1", { gpuCostPerHourUsd: 2.5 });
    const rewards: number[] = [];
    const rise = () => {
      const first = rewards.slice(0, 10).reduce((a, b) => a + b, 0) / 10;
      const last = rewards.slice(-10).reduce((a, b) => a + b, 0) / 10;
      return { first, last };
    };
    let result: PipelineResult | undefined;
    for (let round = 0; round < 4; round++) {
      const first = await model.getStep();
      result = await trainPipeline({
        model, steps: 20, groups: toyGroups(model, 7), train: { learningRate: 1e-2 }, maxStepsOffPolicy: 1,
        onStep: (e) => void (e.type === "train" && rewards.push(e.reward)),
      });
      assert.equal(result.firstStep, first);
      const { first: a, last: b } = rise();
      if (b - a >= 0.3) break;
    }
    const { first, last } = rise();
    const rows = trainRows(await model.historyRows());
    // A step that trained nothing (every group's rewards equal) has no lag to report.
    const lags = rows.map((r) => r.policyLagMax).filter((lag) => lag !== undefined);
    console.log(`pipeline k=1: ${rewards.length} steps, first 10 ${first.toFixed(3)}, last 10 ${last.toFixed(3)}; policy lag max per step ${lags.join(",")}; ` +
      `rollouts ${result!.rolloutSeconds.toFixed(1)} s, training ${result!.trainSeconds.toFixed(1)} s, both ${result!.overlapSeconds.toFixed(1)} s`);
    assert.ok(last - first >= 0.3, `reward went from ${first.toFixed(3)} to ${last.toFixed(3)} in ${rewards.length} steps`);
    assert.ok(lags.every((lag) => lag === 0 || lag === 1), `a step trained tokens more than 1 step behind: ${lags.join(",")}`);
    assert.ok(lags.includes(1), "no step trained on rollouts of the step before: the stages never overlapped");
    // Every trained step reports both throughputs: the trainer's and its rollouts' sampling.
    const trained = rows.filter((r) => r.tokensTrained);
    assert.ok(trained.length && trained.every((r) => (r.samplingTokensPerSecond ?? 0) > 0 && (r.trainerTokensPerSecond ?? 0) > 0),
      `throughputs: ${trained.map((r) => `${r.samplingTokensPerSecond}/${r.trainerTokensPerSecond}`).join(", ")}`);
    // And its cost: its rollouts' and its own wall time at the model's price.
    for (const r of trained) {
      assert.ok((r.samplingSeconds ?? 0) > 0 && (r.stepSeconds ?? 0) > 0 && r.gpuCostPerHourUsd === 2.5, JSON.stringify(r));
      assert.ok(Math.abs(r.costUsd! - 2.5 * (r.samplingSeconds! + r.stepSeconds!) / 3600) < 1e-9, JSON.stringify(r));
    }
    assert.ok(result!.overlapSeconds > 0);
    await assertIdle(model);
  });

  it("a group further behind than maxStepsOffPolicy is dropped, or retried once, and counted in the step's metrics", { timeout: 120_000 }, async () => {
    for (const staleGroups of ["drop", "retry"] as const) {
      const model = await fresh(`stale-${staleGroups}`);
      const toy = toyGroups(model, 11, 2, 4);
      // From step 2 on, one group's rollouts ask step 0 by name: 2 steps behind when it trains.
      const groups = (step: number) => step < 2 ? toy(step) : [...toy(step), new TrajectoryGroup(Array.from({ length: 4 }, (_, i) =>
        () => model.atStep(0, () => rollout(model, randomBoard(rng(step)), i))))];
      const run = await trainPipeline({ model, steps: 3, groups, train: { learningRate: 1e-2 }, maxStepsOffPolicy: 1, staleGroups });
      const row = trainRows(await model.historyRows())[2]!;
      assert.equal(row.groups, 2, "the stale group was sent to the trainer");
      assert.equal(row.groupsDroppedStale, 1);
      assert.equal(row.groupsRetriedStale, staleGroups === "retry" ? 1 : undefined);
      assert.deepEqual([run.staleDropped, run.staleRetried], [1, staleGroups === "retry" ? 1 : 0]);
      assert.ok((row.policyLagMax ?? 0) <= 1);
    }
    // The server keeps the bound itself: a step told maxStepsOffPolicy skips a group sampled further back.
    const model = await fresh("stale-server");
    const old = await gatherTrajectoryGroups(toyGroups(model, 5, 2, 4)(0), { progress: false });
    for (const group of old) group.trajectories.forEach((t, i) => (t.reward = i));  // every group has something to learn
    await model.train(await gatherTrajectoryGroups(toyGroups(model, 6, 2, 4)(0), { progress: false }), { learningRate: 1e-2, progress: false });
    const result = await model.train(old, { learningRate: 1e-2, maxStepsOffPolicy: 0, progress: false });
    assert.equal(result.metrics.groupsSkippedByReason?.stale, 2);
    assert.equal(result.metrics.policyLagMax, undefined, "nothing trained, so no lag");
  });

  it("evaluations run as their own stage, each pinned to its step, logged at that step", { timeout: 120_000 }, async () => {
    const model = await fresh("eval-stage");
    const evaluated: Array<{ steps: Set<number | undefined> }> = [];
    const board = randomBoard(rng(99));
    const evalGroups = () => {
      const entry = { steps: new Set<number | undefined>() };
      evaluated.push(entry);
      return [new TrajectoryGroup(Array.from({ length: 4 }, (_, i) => async () => {
        const t: Trajectory = await rollout(model, board, 5000 + i);
        entry.steps.add(t.oldestPolicyStep());
        return t;
      }))];
    };
    await trainPipeline({ model, steps: 3, groups: toyGroups(model, 13, 2, 4), train: { learningRate: 1e-2 }, maxStepsOffPolicy: 1,
      evaluate: { every: 1, groups: evalGroups } });
    const val = (await model.historyRows()).filter((r) => r.split === "val").map((r) => r.step).sort();
    assert.deepEqual(val, [0, 1, 2, 3]);
    assert.deepEqual(evaluated.map((e) => [...e.steps]), [[0], [1], [2], [3]], "an evaluation sampled another step than its own");
  });

  it("a run that starts after a step trained outside it (a warm start) evaluates its starting step first; a continued run does not again",
    { timeout: 120_000 }, async () => {
    const model = await fresh("eval-start");
    const board = randomBoard(rng(98));
    const evalGroups = () => [new TrajectoryGroup(Array.from({ length: 4 }, (_, i) => () => rollout(model, board, 6000 + i)))];
    await model.train(await gatherTrajectoryGroups(toyGroups(model, 14, 2, 4)(0), { progress: false }), { learningRate: 1e-2, progress: false });
    const valSteps = async () => (await model.historyRows()).filter((r) => r.split === "val").map((r) => r.step);
    const options = { model, steps: 2, groups: toyGroups(model, 15, 2, 4), train: { learningRate: 1e-2 }, evaluate: { every: 2, groups: evalGroups } };
    await trainPipeline(options);
    assert.deepEqual(await valSteps(), [1, 3], "the step the run started from, then the last");
    await trainPipeline(options);
    assert.deepEqual(await valSteps(), [1, 3, 5], "step 3 was evaluated by the run before");
  });

  it("a stop (signal, rollout errors past maxExceptions, a closed backend) stops every stage at a committed step", { timeout: 180_000 }, () => named(async () => {
    // The signal, mid-run, from a trainLoop as a notebook's interrupt does; then the loop continues.
    const model = await fresh("stop-signal");
    const controller = new AbortController();
    const run = trainLoop({ model, steps: 50, groups: toyGroups(model, 17), train: { learningRate: 1e-2 }, maxStepsOffPolicy: 1,
      signal: controller.signal });
    while ((await model.getStep()) < 2) await new Promise((r) => setTimeout(r, 50));
    controller.abort();
    await assert.rejects(run, (e: unknown) => e instanceof StoppedError);
    await assertIdle(model);
    const at = await model.getStep();
    assert.ok(at >= 2 && at < 50);
    const again = await trainLoop({ model, steps: 1, groups: toyGroups(model, 18), train: { learningRate: 1e-2 }, maxStepsOffPolicy: 1 });
    assert.equal(await model.getStep(), at + 1);
    assert.equal(trainRows(again.history).length, at + 1);

    // A rollout that throws at step 2 (maxExceptions 0): the error, and nothing left running.
    const failing = await fresh("stop-error");
    const toy = toyGroups(failing, 19);
    const groups = (step: number) => step === 2
      ? [...toy(step), new TrajectoryGroup([async () => { throw new Error("the environment broke"); }, () => rollout(failing, randomBoard(rng(1)), 1)])]
      : toy(step);
    // (Each check names the error it got: node's runner shows an assertion carrying an ArtError as `{}`.)
    await trainPipeline({ model: failing, steps: 6, groups, train: { learningRate: 1e-2 }, maxStepsOffPolicy: 1 }).then(
      () => assert.fail("the pipeline finished although a rollout threw"),
      (e: unknown) => assert.ok(e instanceof GatherError && /the environment broke/.test(e.message), `it ended with ${errorText(e)}`));
    await assertIdle(failing);
    assert.ok((await failing.getStep()) <= 2);

    // The backend closes mid-run: the pipeline ends with the backend's error, not a hang.
    const other = await LocalBackend.start({ dataDir: fs.mkdtempSync(path.join(os.tmpdir(), "art-pipeline-close-")), baseModel: "builtin:tiny", engine: "hf", device: "cpu" });
    const closing = new TrainableModel({ name: "stop-close", project: "pipeline-tests", baseModel: "builtin:tiny" });
    await closing.register(other);
    const closed = trainPipeline({ model: closing, steps: 50, groups: toyGroups(closing, 23), train: { learningRate: 1e-2 }, maxStepsOffPolicy: 1 });
    // Whatever was in flight when the server stopped (a rollout, a step, a check), the pipeline says the backend closed.
    const rejected = closed.then(() => assert.fail("the pipeline finished on a closed backend"),
      (e: unknown) => assert.ok(e instanceof BackendClosedError || /server is stopping/.test(String((e as Error)?.message)), `it ended with ${errorText(e)}`));
    while ((await closing.getStep()) < 1) await new Promise((r) => setTimeout(r, 50));
    await other.close();
    await rejected;
  }));
});
