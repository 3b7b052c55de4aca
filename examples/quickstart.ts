// `npm run quickstart`: trains the default base model (SmolLM2-135M-Instruct, on this machine's CPU)
// on the toy task from a terminal and prints the reward of each step. The same loop a notebook
// runs, without the notebook.
//
//   npm run quickstart [-- --steps 30 --groups 2 --base-model builtin:tiny --lr 1e-2]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { DEFAULT_BASE_MODEL, gatherTrajectoryGroups, LocalBackend, TrainableModel, TrajectoryGroup } from "../lib/index";
import { randomBoard, rng, rollout } from "./toy-task";

async function main() {
  const { values } = parseArgs({ options: {
    steps: { type: "string", default: "30" }, groups: { type: "string", default: "2" },
    "base-model": { type: "string", default: DEFAULT_BASE_MODEL }, lr: { type: "string", default: "3e-4" },
  } });
  const baseModel = values["base-model"];
  // A fresh data dir: every run starts from step 0 with the same LoRA initialisation.
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "art-quickstart-"));
  const backend = await LocalBackend.start({ baseModel, dataDir });
  console.log(`data dir ${dataDir}`);
  try {
    const model = new TrainableModel({ name: "quickstart", project: "quickstart", baseModel });
    await model.register(backend);
    const random = rng(0);
    for (let step = 0; step < Number(values.steps); step++) {
      const groups = Array.from({ length: Number(values.groups) }, (_, g) => {
        const board = randomBoard(random);
        return new TrajectoryGroup(Array.from({ length: 8 }, (_, i) => () => rollout(model, board, step * 1000 + g * 10 + i)));
      });
      const gathered = await gatherTrajectoryGroups(groups, { progress: false });
      const rewards = gathered.flatMap((g) => g.trajectories.map((t) => t.reward));
      const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
      const result = await model.train(gathered, { learningRate: Number(values.lr), progress: false });
      console.log(`step ${String(step).padStart(3)}  reward ${mean.toFixed(3)}  ${"#".repeat(Math.round(mean * 40))}` +
        `  -> ${model.inferenceName(result.step)}`);
    }
  } finally {
    await backend.close();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
