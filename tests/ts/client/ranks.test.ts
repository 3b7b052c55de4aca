// Trainer ranks from TypeScript: LocalBackend.start({ trainRanks: 2 }) trains the toy task on two
// torch.distributed processes behind the same API, and a rank count this machine cannot hold is one
// ConfigurationError line. (The ranks' math and failures are tested in gpu-server/tests/test_ranks.py.)
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { ConfigurationError, LocalBackend, TrainableModel, TrajectoryGroup, trainLoop } from "../../../lib/index";
import { randomBoard, rng, rollout } from "../../../examples/toy-task";

function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), "art-ranks-"));
}

describe("LocalBackend with trainRanks", () => {
  it("trains on two ranks through the same trainLoop", { timeout: 180_000 }, async () => {
    const backend = await LocalBackend.start({ dataDir: tempDir(), baseModel: "builtin:tiny", engine: "hf", device: "cpu", trainRanks: 2 });
    try {
      const model = new TrainableModel({ name: "ranks", project: "client-tests", baseModel: "builtin:tiny" });
      await model.register(backend);
      const groups = () => Array.from({ length: 2 }, (_, g) =>
        new TrajectoryGroup(Array.from({ length: 4 }, (_, i) => () => rollout(model, randomBoard(rng(g)), g * 10 + i))));
      const run = await trainLoop({ model, steps: 2, groups, train: { learningRate: 1e-2 } });
      assert.equal(await model.getStep(), 2);
      assert.deepEqual(run.history.filter((r) => r.split === "train").map((r) => r.step), [0, 1]);
    } finally {
      await backend.close();
    }
  });

  it("more ranks than this machine has cores is one ConfigurationError line", async () => {
    let error: unknown;
    try {
      await (await LocalBackend.start({ dataDir: tempDir(), baseModel: "builtin:tiny", trainRanks: 1000 })).close();
    } catch (caught) {
      error = caught;
    }
    assert.ok(error instanceof ConfigurationError, String(error));
    assert.equal(error.message.split("\n").length, 1);
    assert.match(error.message, /--train-ranks: 1000 CPU ranks on this machine, which has \d+ cores/);
    await assert.rejects(LocalBackend.start({ dataDir: tempDir(), trainRanks: 0 }), /trainRanks/);
    await assert.rejects(LocalBackend.start({ dataDir: tempDir(), baseModel: "builtin:tiny", trainShardBase: true }),
      (e: unknown) => e instanceof ConfigurationError && /--train-shard-base shards the base model across trainer ranks/.test(e.message));
  });
});
