// `npm run quickstart`: trains builtin:tiny on the toy task from a terminal and prints the reward
// of each step. The same loop a notebook runs, without the notebook.
//
//   npm run quickstart [-- --steps 40]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { gatherTrajectoryGroups, LocalBackend, TrainableModel, TrajectoryGroup } from "../lib/index";
import { randomBoard, rng, rollout } from "./toy-task";

async function main() {
  const { values } = parseArgs({ options: { steps: { type: "string", default: "40" }, groups: { type: "string", default: "4" } } });
  // A fresh data dir: every run starts from step 0 with the same LoRA initialisation.
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "art-quickstart-"));
  const backend = await LocalBackend.start({ baseModel: "builtin:tiny", dataDir });
  console.log(`data dir ${dataDir}`);
  try {
    const model = new TrainableModel({ name: "quickstart", project: "quickstart", baseModel: "builtin:tiny" });
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
      const result = await model.train(gathered, { learning_rate: 1e-2, progress: false });
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
