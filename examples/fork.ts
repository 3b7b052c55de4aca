// Branching a run with `backend.forkCheckpoint`: train a trunk on the toy task, fork its checkpoint
// into two branches that go on with different learning rates, and compare them with the trunk
// going on as it was. Each branch starts from exactly the trunk's adapter and optimizer state.
//
//   npx tsx examples/fork.ts [--base-model builtin:tiny --lr 1e-2 --steps 6 --branch-steps 4]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { DEFAULT_BASE_MODEL, LocalBackend, TrainableModel } from "../lib/index";
import { trainToyTask as train } from "./toy-task";

async function main() {
  const { values } = parseArgs({ options: {
    "base-model": { type: "string", default: DEFAULT_BASE_MODEL }, lr: { type: "string", default: "3e-4" },
    steps: { type: "string", default: "6" }, "branch-steps": { type: "string", default: "4" },
  } });
  const baseModel = values["base-model"];
  const lr = Number(values.lr);
  const branchSteps = Number(values["branch-steps"]);
  const backend = await LocalBackend.start({ baseModel, dataDir: fs.mkdtempSync(path.join(os.tmpdir(), "art-fork-")) });
  try {
    const trunk = new TrainableModel({ name: "trunk", project: "fork-example", baseModel });
    await trunk.register(backend);
    const trunkRewards = await train(trunk, Number(values.steps), lr, 1);
    const forkedAt = await trunk.getStep();
    console.log(`trunk: ${forkedAt} steps, reward ${trunkRewards.map((r) => r.toFixed(2)).join(" ")}`);
    const rows: string[] = [];
    for (const [name, factor] of [["lr-half", 0.5], ["lr-double", 2]] as const) {
      const branch = new TrainableModel({ name, project: "fork-example", baseModel });
      await branch.register(backend);
      const info = await backend.forkCheckpoint(branch, { fromModel: "trunk" });
      const rewards = await train(branch, branchSteps, lr * factor, 2);  // the same rollouts' seeds on every branch
      rows.push(`${name.padEnd(10)} from trunk@${info.forkedFrom?.step}, lr ${lr * factor}: ${rewards.map((r) => r.toFixed(2)).join(" ")}`);
    }
    const onward = await train(trunk, branchSteps, lr, 2);
    rows.push(`${"trunk".padEnd(10)} on from step ${forkedAt}, lr ${lr}: ${onward.map((r) => r.toFixed(2)).join(" ")}`);
    console.log(`reward per step after step ${forkedAt}:\n${rows.join("\n")}`);
  } finally {
    await backend.close();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
