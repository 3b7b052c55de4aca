// Experiment tracking: the same training loop as any other, with `report` on the model. The server
// sends each history row (train and val metrics, the step's timings, a sample of trajectories) to
// Weights & Biases and to Trackio as it writes it.
//
//   WANDB_MODE=offline npx tsx examples/tracking.ts [--base-model builtin:tiny --lr 1e-2 --steps 4]
//   npm run dashboard        # Trackio's dashboard: http://127.0.0.1:7860
//
// W&B online needs only WANDB_API_KEY where the server runs; WANDB_MODE=offline keeps the run on
// disk (upload it later with `wandb sync <folder>`). Trackio needs no account.
import { parseArgs } from "node:util";
import { DEFAULT_BASE_MODEL, LocalBackend, TrainableModel } from "../lib/index";
import { trainToyTask } from "./toy-task";

async function main() {
  const { values } = parseArgs({ options: {
    "base-model": { type: "string", default: DEFAULT_BASE_MODEL }, lr: { type: "string", default: "1e-3" },
    steps: { type: "string", default: "12" }, "data-dir": { type: "string" },
  } });
  const baseModel = values["base-model"];
  const backend = await LocalBackend.start({ baseModel, ...(values["data-dir"] ? { dataDir: values["data-dir"] } : {}) });
  try {
    const model = new TrainableModel({
      name: `toy-${Date.now().toString(36)}`, project: "tracking-example", baseModel,
      report: ["wandb", "trackio"], reportTrajectories: 4,
    });
    await model.register(backend);
    const rewards = await trainToyTask(model, Number(values.steps), Number(values.lr), 1);
    console.log(`${model.name}: reward per step ${rewards.map((r) => r.toFixed(2)).join(" ")}`);
    for (const reporter of (await model.getInfo()).reporters) {
      console.log(`${reporter.tracker}: ${reporter.state}, ${reporter.rowsSent} rows sent so far${reporter.location ? `, ${reporter.location}` : ""}${reporter.error ? ` (${reporter.error})` : ""}`);
    }
  } finally {
    await backend.close();  // the server finishes the runs as it stops
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
