// The TypeScript client against the real gpu-server process on builtin:tiny: the full loop
// (register, gather groups of rollouts through model.openai(), train, serve the new step) until the
// reward rises, validation errors, a wrong token, a crashed server and resuming after it.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import {
  BadTrajectoryError,
  ConfigurationError,
  gatherTrajectoryGroups,
  LocalBackend,
  Model,
  downloadFromHub,
  plotHistory,
  pushToHub,
  RemoteBackend,
  retry,
  rulerScoreGroup,
  ServerApiError,
  ServerCrashedError,
  TrainableModel,
  Trajectory,
  TrajectoryGroup,
  takeTurn,
  trainLoop,
  turnDemonstrations,
  UnauthorizedError,
  warmStart,
} from "../../../lib/index";
import { judgeMessages, judgeRetryMessage } from "../../../lib/integrations/ruler";
import { randomBoard, rng, rollout } from "../../../examples/toy-task";
import { startHubStandIn } from "../support/hub-standin";

describe("TrainableModel on a LocalBackend", () => {
  let dataDir: string;
  let backend: LocalBackend;

  before(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "art-client-"));
    backend = await LocalBackend.start({ dataDir, baseModel: "builtin:tiny", engine: "hf", device: "cpu" });
  });
  after(async () => {
    await backend?.close();
  });

  it("trainLoop continues a model, marks each later run on its chart, and a model back at step 0 starts without marks", async () => {
    const groups = (of: TrainableModel, seed: number) => () => Array.from({ length: 2 }, (_, g) =>
      new TrajectoryGroup(Array.from({ length: 4 }, (_, i) => () => rollout(of, randomBoard(rng(seed + g)), seed * 100 + g * 10 + i))));
    const model = new TrainableModel({ name: "loop-marks", project: "client-tests", baseModel: "builtin:tiny" });
    await model.register(backend);
    const first = await trainLoop({ model: model, steps: 1, groups: groups(model, 1), train: { learningRate: 1e-2 } });
    assert.deepEqual(first.marks, []);
    const second = await trainLoop({ model: model, steps: 1, groups: groups(model, 2), train: { learningRate: 1e-2 } });
    assert.equal(await model.getStep(), 2);
    assert.deepEqual(second.marks.map((m) => m.step), [0.5]);
    assert.match(second.marks[0]!.label, /^run from step 1 \(\d\d:\d\d\)$/);
    assert.deepEqual(second.history.filter((r) => r.split === "train").map((r) => r.step), [0, 1]);
    // The same model name in a fresh data dir is a fresh run: the earlier run's marks do not carry over.
    const freshDir = fs.mkdtempSync(path.join(os.tmpdir(), "art-client-fresh-"));
    const fresh = await LocalBackend.start({ dataDir: freshDir, baseModel: "builtin:tiny", engine: "hf", device: "cpu" });
    try {
      const again = new TrainableModel({ name: "loop-marks", project: "client-tests", baseModel: "builtin:tiny" });
      await again.register(fresh);
      const restarted = await trainLoop({ model: again, steps: 1, groups: groups(again, 3), train: { learningRate: 1e-2 } });
      assert.deepEqual(restarted.marks, []);
    } finally {
      await fresh.close();
    }
  });

  it("trains the toy task through model.openai() until the reward rises by 0.3", async () => {
    const model = new TrainableModel({ name: "loop", project: "client-tests", baseModel: "builtin:tiny" });
    const info = await model.register(backend);
    assert.equal(info.step, 0);
    const random = rng(7);
    const rewards: number[] = [];
    for (let step = 0; step < 120; step++) {
      const groups = Array.from({ length: 4 }, (_, g) => {
        const board = randomBoard(random);
        return new TrajectoryGroup(Array.from({ length: 8 }, (_, i) => () => rollout(model, board, step * 1000 + g * 10 + i)));
      });
      const gathered = await gatherTrajectoryGroups(groups, { progress: false });
      const mean = gathered.flatMap((g) => g.trajectories).reduce((s, t) => s + t.reward, 0) / 32;
      rewards.push(mean);
      const result = await model.train(gathered, { learningRate: 1e-2, progress: false });
      assert.equal(result.step, step + 1);
      if (rewards.length >= 20) {
        const first = rewards.slice(0, 10).reduce((a, b) => a + b) / 10;
        const last = rewards.slice(-10).reduce((a, b) => a + b) / 10;
        if (last - first >= 0.3) break;
      }
    }
    const first = rewards.slice(0, 10).reduce((a, b) => a + b) / 10;
    const last = rewards.slice(-10).reduce((a, b) => a + b) / 10;
    console.log(`client loop: ${rewards.length} steps, first 10 ${first.toFixed(3)}, last 10 ${last.toFixed(3)}`);
    assert.ok(last - first >= 0.3, `reward went from ${first.toFixed(3)} to ${last.toFixed(3)} in ${rewards.length} steps`);
    // The new step is what the bare name serves, and it is listed.
    assert.equal(await model.getStep(), rewards.length);
    const listed = await model.openai().models.list();
    assert.ok(listed.data.some((m) => m.id === model.inferenceName(rewards.length)));
  });

  it("returns the history as a danfo DataFrame and plots reward per step", async () => {
    const model = new TrainableModel({ name: "loop", project: "client-tests", baseModel: "builtin:tiny" });
    await model.register(backend);
    const frame = await model.history();
    const steps = await model.getStep();
    assert.equal(frame.shape[0], steps);
    for (const column of ["step", "split", "reward", "loss", "gradNorm", "hit"]) assert.ok(frame.columns.includes(column), column);
    const figure = plotHistory(frame, ["reward", "loss"]);
    const trace = (metric: string, smoothed: boolean) =>
      figure.data.find((t) => JSON.stringify(t.meta) === JSON.stringify({ split: "train", metric, smoothed }));
    assert.equal((trace("reward", false)?.y as number[]).length, steps);
    assert.equal((trace("reward", true)?.y as number[]).length, steps, "a smoothed line beside the per-step one");
    assert.equal(trace("loss", false)?.yaxis, "y2");
  });

  it("logs an evaluation split, and deleting checkpoints keeps the latest and the best", async () => {
    const model = new TrainableModel({ name: "keeper", project: "client-tests", baseModel: "builtin:tiny" });
    await model.register(backend);
    for (const [k, valReward] of [0.2, 0.9, 0.4].entries()) {
      const board = randomBoard(rng(k));
      const group = new TrajectoryGroup(await Promise.all([0, 1].map((i) => rollout(model, board, i))));
      for (const t of group.trajectories) t.reward = valReward;
      const row = await model.log([group], { split: "val" });
      assert.equal(row.reward, valReward);
      group.trajectories[0]!.reward = 1;
      group.trajectories[1]!.reward = 0;
      await model.train([group], { learningRate: 1e-3, progress: false });
    }
    const rows = await model.historyRows();
    assert.deepEqual(rows.filter((r) => r.split === "val").map((r) => r.step), [0, 1, 2]);
    const result = await model.deleteCheckpoints({ keepBestBy: "val/reward" });
    assert.deepEqual({ deleted: result.deleted, kept: result.kept, best: result.bestStep }, { deleted: [0, 2], kept: [1, 3], best: 1 });
  });

  it("forks a checkpoint: the fork answers as the parent's step did and trains on while the parent stays", async () => {
    const parent = new TrainableModel({ name: "loop", project: "client-tests", baseModel: "builtin:tiny" });
    await parent.register(backend);
    const parentStep = await parent.getStep();
    const greedy = async (model: string) => (await parent.openai().chat.completions.create({
      model, messages: [{ role: "user", content: "Name an empty cell." }], max_tokens: 6, temperature: 0, seed: 1,
    })).choices[0]?.message.content;
    const branch = new TrainableModel({ name: "loop-branch", project: "client-tests", baseModel: "builtin:tiny" });
    await branch.register(backend);
    const info = await backend.forkCheckpoint(branch, { fromModel: "loop", notAfterStep: 3 });
    assert.deepEqual({ step: info.step, forkedFrom: info.forkedFrom }, { step: 3, forkedFrom: { project: "client-tests", name: "loop", step: 3 } });
    assert.equal(branch.inferenceName(), "loop-branch");
    assert.equal(await greedy("loop-branch"), await greedy("loop@3"));
    assert.deepEqual((await branch.historyRows()).filter((r) => r.split === "train").map((r) => r.step), [0, 1, 2]);
    const board = randomBoard(rng(11));
    const group = new TrajectoryGroup(await Promise.all([0, 1, 2, 3].map((i) => rollout(branch, board, i))));
    group.trajectories.forEach((t, i) => { t.reward = i % 2; });
    assert.equal((await branch.train([group], { learningRate: 1e-2, progress: false })).step, 4);
    assert.equal(await parent.getStep(), parentStep);
    // Bad input: a clear error before the request, or the server's 4xx with what to do.
    await assert.rejects(backend.forkCheckpoint(branch, { fromModel: "loop", notAfterStep: -1 }),
      (e) => e instanceof ConfigurationError && /notAfterStep/.test(e.message));
    await assert.rejects(backend.forkCheckpoint(branch, { fromModel: "loop" }),
      (e) => e instanceof ServerApiError && e.status === 409 && /overwrite: true/.test(e.message));
    await assert.rejects(backend.forkCheckpoint(branch, { fromModel: "nobody", overwrite: true }),
      (e) => e instanceof ServerApiError && e.status === 404 && /no model client-tests\/nobody/.test(e.message));
    assert.equal(await branch.getStep(), 4);
  });

  it("runs the same rollout code against a plain OpenAI-compatible Model (a baseline)", async () => {
    assert.equal(Model.fromEnv(), process.env.ART_BASELINE_MODEL ? Model.fromEnv() : null);
    const baseline = new Model({ name: "builtin:tiny", baseURL: `${backend.url}/v1`, apiKey: backend.token });
    const completion = await baseline.openai().chat.completions.create({
      model: baseline.inferenceName(), messages: [{ role: "user", content: "Name an empty cell." }], max_tokens: 4,
    });
    assert.ok(typeof completion.choices[0]?.message.content === "string");
  });

  it("trains SFT from a JSONL file and then answers as taught", async () => {
    const model = new TrainableModel({ name: "taught", project: "client-tests", baseModel: "builtin:tiny" });
    await model.register(backend);
    const file = path.join(dataDir, "sft.jsonl");
    const pairs = [["Say hi.", "hi there"], ["Name a corner.", "A1"]];
    fs.writeFileSync(file, pairs.map(([q, a]) => JSON.stringify({ messages: [{ role: "user", content: q }, { role: "assistant", content: a }] })).join("\n"));
    const result = await model.trainSft(file, { learningRate: 2e-2, epochs: 40, batchSize: 2, progress: false });
    assert.equal(result.step, 1);
    for (const [q, a] of pairs) {
      const r = await model.openai().chat.completions.create({ model: model.inferenceName(), messages: [{ role: "user", content: q! }], temperature: 0, max_tokens: 8 });
      assert.equal(r.choices[0]?.message.content, a);
    }
    await assert.rejects(model.trainSft([{ messages: [{ role: "user", content: "x" }] }]), /conversation 0 has no assistant message/);
  });

  it("warmStart trains a scripted player's turns once, at step 0, and skips with a reason otherwise", async () => {
    const model = new TrainableModel({ name: "warm", project: "client-tests", baseModel: "builtin:tiny" });
    await model.register(backend);
    const game = new Trajectory({ messagesAndChoices: [{ role: "system", content: "Name a cell." }] });
    for (const [board, move] of [["board 1", "A1"], ["board 2", "B2"]]) await takeTurn(game, board!, () => move!, { maxTokens: 4, seed: 0 });
    const demos = turnDemonstrations(game);
    const lines: string[] = [];
    const log = console.log;
    console.log = (...args: unknown[]) => { lines.push(args.join(" ")); };
    try {
      assert.equal(await warmStart(model, [], { progress: false }), undefined);
      const first = await warmStart(model, demos, { learningRate: 2e-2, epochs: 40, batchSize: 2, progress: false });
      assert.equal(first?.step, 1);
      assert.equal(await warmStart(model, demos, { progress: false }), undefined, "a second call does not train again");
    } finally {
      console.log = log;
    }
    assert.equal(await model.getStep(), 1);
    assert.match(lines.join("\n"), /no demonstrations, so RL starts from the base model[\s\S]*2 demonstrations, loss [\d.]+, now at step 1[\s\S]*at step 1, it has trained already; skipped/);
    for (const [board, move] of [["board 1", "A1"], ["board 2", "B2"]]) {
      const r = await model.openai().chat.completions.create({ model: model.inferenceName(), temperature: 0, max_tokens: 4,
        messages: [{ role: "system", content: "Name a cell." }, { role: "user", content: board! }] });
      assert.equal(r.choices[0]?.message.content, move, "the model answers each turn as the scripted player did");
    }
  });

  it("scores a group with a local judge, retrying once when it miscounts", async () => {
    // A judge taught (by SFT, on this exact prompt) to miscount first and answer right when told.
    const group = new TrajectoryGroup([
      new Trajectory({ messagesAndChoices: [{ role: "user", content: "Play." }, { role: "assistant", content: "I won." }], reward: 0.2 }),
      new Trajectory({ messagesAndChoices: [{ role: "user", content: "Play." }, { role: "assistant", content: "I lost." }], reward: 0.7 }),
    ]);
    const prompt = judgeMessages(group);
    const wrong = '{"scores": [{"trajectory_id": "1", "explanation": "ok", "score": 1}]}';
    const right = '{"scores": [{"trajectory_id": "1", "explanation": "won", "score": 1}, {"trajectory_id": "2", "explanation": "lost", "score": 0}]}';
    const retryText = judgeRetryMessage("expected 2 scores with trajectory_id 1..2, got 1", 2);
    const judge = new TrainableModel({ name: "judge", project: "client-tests", baseModel: "builtin:tiny" });
    await judge.register(backend);
    await judge.trainSft([
      { messages: [...prompt, { role: "assistant", content: wrong }] },
      { messages: [...prompt, { role: "assistant", content: wrong }, { role: "user", content: retryText }, { role: "assistant", content: right }] },
    ], { learningRate: 2e-2, epochs: 150, batchSize: 2, progress: false });
    await rulerScoreGroup(group, { judge, maxTokens: 80, structuredOutput: false });  // free text: it is taught to miscount
    assert.deepEqual(group.trajectories.map((t) => t.reward), [1, 0]);
    assert.deepEqual(group.trajectories.map((t) => t.metrics.independentReward), [0.2, 0.7]);
    assert.deepEqual(group.trajectories.map((t) => t.logs), [["judge: 1.000 won"], ["judge: 0.000 lost"]]);
    // Its calls, priced: the same judge as a plain Model with a price per million tokens. Both calls
    // (the miscount and the retry) count, and the logged evaluation's row records them.
    const usage = group.judgeUsage!;
    assert.equal(usage.calls, 2);
    assert.equal(usage.costUsd, undefined, "a TrainableModel judge has no price");
    const priced = new Model({ name: "judge", baseURL: `${backend.url}/v1`, apiKey: backend.token,
      pricing: { inputPerMillionUsd: 2, outputPerMillionUsd: 8 } });
    const again = new TrajectoryGroup(group.trajectories.map((t) => new Trajectory({ messagesAndChoices: t.messages(), reward: 0 })));
    await rulerScoreGroup(again, { judge: priced, maxTokens: 80, structuredOutput: false });
    const cost = again.judgeUsage!;
    assert.deepEqual({ calls: cost.calls, prompt: cost.promptTokens, completion: cost.completionTokens }, { calls: 2, prompt: usage.promptTokens, completion: usage.completionTokens });
    assert.ok(cost.promptTokens > 100 && cost.completionTokens > 10, JSON.stringify(cost));
    assert.ok(Math.abs(cost.costUsd! - (cost.promptTokens * 2 + cost.completionTokens * 8) / 1e6) < 1e-12);
    const row = await judge.log([again], { split: "judged" });
    assert.deepEqual([row.judgeCalls, row.judgePromptTokens, row.judgeCompletionTokens], [2, cost.promptTokens, cost.completionTokens]);
    assert.ok(Math.abs(row.judgeCostUsd! - cost.costUsd!) < 1e-12);
    assert.throws(() => new Model({ name: "judge", pricing: { inputPerMillionUsd: -1, outputPerMillionUsd: 1 } }),
      (e) => e instanceof ConfigurationError && /pricing\.inputPerMillionUsd/.test(e.message));
  });

  it("pushes a step to a Hub stand-in as a PEFT adapter repo and downloads a base model the server then loads", async () => {
    const hubApi = await import("@huggingface/hub");
    const hub = await startHubStandIn("hf_test");
    try {
      const model = new TrainableModel({ name: "loop", project: "client-tests", baseModel: "builtin:tiny" });
      const info = await model.register(backend);
      const pushed = await pushToHub(model, { repo: "me/loop-adapter", token: "hf_test", hubUrl: hub.url });
      assert.equal(pushed.step, info.step);
      const repo = hub.repos.get("me/loop-adapter")!;
      assert.deepEqual([...repo.files.keys()].sort(), ["README.md", "adapter_config.json", "adapter_model.safetensors"]);
      const checkpoint = path.join(info.path, "checkpoints", String(info.step).padStart(4, "0"));
      assert.ok(repo.files.get("adapter_model.safetensors")!.content.equals(fs.readFileSync(path.join(checkpoint, "adapter_model.safetensors"))));
      const card = repo.files.get("README.md")!.content.toString();
      assert.match(card, /base_model: builtin:tiny/);
      assert.match(card, new RegExp(`step ${info.step}`));
      await assert.rejects(pushToHub(model, { repo: "me/other", token: "wrong", hubUrl: hub.url }));

      // A "base model" repository: the built-in tiny model's files, uploaded to the stand-in.
      const builtin = path.join(dataDir, "builtin", "tiny-v1");
      await hubApi.createRepo({ repo: "org/tiny", accessToken: "hf_test", hubUrl: hub.url });
      await hubApi.uploadFiles({ repo: "org/tiny", accessToken: "hf_test", hubUrl: hub.url,
        files: fs.readdirSync(builtin).map((f) => ({ path: f, content: new Blob([fs.readFileSync(path.join(builtin, f))]) })) });
      const cacheDir = path.join(dataDir, "hf-cache");
      const snapshot = await downloadFromHub("org/tiny", { cacheDir, hubUrl: hub.url, token: "hf_test" });
      assert.ok(fs.existsSync(path.join(snapshot, "config.json")));
      const other = await LocalBackend.start({ dataDir: path.join(dataDir, "second"), baseModel: "org/tiny", engine: "hf", device: "cpu",
        env: { HF_HUB_CACHE: cacheDir } });
      try {
        const fromHub = new TrainableModel({ name: "hubbed", project: "client-tests", baseModel: "org/tiny" });
        await fromHub.register(other);
        const r = await fromHub.openai().chat.completions.create({ model: "org/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
        assert.ok(r.choices[0]?.message);
      } finally {
        await other.close();
      }
    } finally {
      await hub.close();
    }
  });

  it("validates before sending and names the trajectory at fault", async () => {
    const model = new TrainableModel({ name: "strict", project: "client-tests", baseModel: "builtin:tiny" });
    await model.register(backend);
    const board = randomBoard(rng(1));
    const good = await rollout(model, board, 1);
    await assert.rejects(model.train([]), BadTrajectoryError);
    await assert.rejects(model.train([new TrajectoryGroup([])]), /group 0 has no finished trajectories/);
    const nan = new Trajectory({ messagesAndChoices: good.messagesAndChoices, reward: Number.NaN });
    await assert.rejects(model.train([new TrajectoryGroup([good, nan])]), /group 0, trajectory 1: reward is NaN/);
    const plain = new Trajectory({ messagesAndChoices: [{ role: "user", content: "hi" }, { role: "assistant", content: "B2" }], reward: 1 });
    const wrong = new Trajectory({ messagesAndChoices: [{ role: "user", content: "hi" }, { role: "assistant", content: "A1" }], reward: 0 });
    await assert.rejects(model.train([new TrajectoryGroup([plain, wrong])]),
      /group 0, trajectory 0 has no sampled choices \(nor has any other of its group\): .*allowTrainingWithoutLogprobs: true/);
    // With the option, a group of plain messages (offline logs) trains: scored by the policy at the step's start.
    const offline = await model.train([new TrajectoryGroup([plain, wrong])], { learningRate: 1e-2, allowTrainingWithoutLogprobs: true, progress: false });
    assert.equal(offline.metrics.unsampledTrajectoriesTrained, 2);
    assert.ok(Number(offline.metrics.tokensTrained) > 0 && offline.metrics.samplerLogprobDiffMean === 0, JSON.stringify(offline.metrics));
    const foreign = { id: "x", object: "chat.completion", created: 0, model: "m", choices: [{ index: 0, finish_reason: "stop",
      logprobs: null, message: { role: "assistant", content: "B2", refusal: null } }] };
    assert.throws(() => new Trajectory().push(foreign as never), /no prompt_token_ids/);
  });

  it("warns about groups whose rewards are all equal, and the step still advances", async () => {
    const model = new TrainableModel({ name: "flat", project: "client-tests", baseModel: "builtin:tiny" });
    await model.register(backend);
    const board = randomBoard(rng(2));
    const group = new TrajectoryGroup(await Promise.all([0, 1].map((i) => rollout(model, board, i))));
    for (const t of group.trajectories) t.reward = 0.5;
    const warnings: string[] = [];
    const warn = console.warn;
    console.warn = (m: string) => warnings.push(m);
    try {
      const result = await model.train([group], { progress: false });
      assert.equal(result.step, 1);
      assert.match(String(result.metrics.nothingTrained), /all rewards in the group are equal/);
    } finally {
      console.warn = warn;
    }
    assert.ok(warnings.some((w) => /same reward for every trajectory/.test(w)), warnings.join("\n"));
  });

  it("refuses a wrong token with UnauthorizedError", async () => {
    const remote = new RemoteBackend({ url: backend.url, token: "wrong" });
    const model = new TrainableModel({ name: "intruder", project: "client-tests", baseModel: "builtin:tiny" });
    await assert.rejects(model.register(remote), UnauthorizedError);
    // A large body too: the server answers from the headers and closes without reading it, gracefully
    // enough that the 401 arrives (not a reset connection), whatever the size.
    for (const megabytes of [2, 5, 20, 2, 5, 20]) {
      await assert.rejects(remote.request("POST", "/v1/art/models/intruder/log", z.unknown(), { padding: "x".repeat(megabytes << 20) }),
        UnauthorizedError);
    }
  });

  it("reuses the server already running on a data dir", async () => {
    const second = await LocalBackend.start({ dataDir });
    assert.equal(second.url, backend.url);
    assert.equal(second.pid, undefined);
    await second.close(); // closing a reused backend leaves the server running
    const model = new TrainableModel({ name: "loop", project: "client-tests", baseModel: "builtin:tiny" });
    assert.ok((await model.register(second)).step > 0);
  });

  it("reports a crashed server with its log, and a new backend resumes every model", async () => {
    const model = new TrainableModel({ name: "loop", project: "client-tests", baseModel: "builtin:tiny" });
    const before = (await model.register(backend)).step;
    process.kill(backend.pid!, "SIGKILL");
    await new Promise((r) => setTimeout(r, 500));
    await assert.rejects(model.getStep(), (error: unknown) => {
      assert.ok(error instanceof ServerCrashedError, String(error));
      assert.match(error.message, /died \(SIGKILL\)/);
      assert.match(error.logTail, /uvicorn|art_server/);
      return true;
    });
    backend = await retry(() => LocalBackend.start({ dataDir, baseModel: "builtin:tiny", engine: "hf", device: "cpu" }), { attempts: 3 });
    const info = await model.register(backend);
    assert.equal(info.resumed, true);
    assert.equal(info.step, before);
  });
});
