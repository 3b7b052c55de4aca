// A training script in your own project (an ES module with top-level await): teach a model to
// answer with an even digit. See docs/own-project.md in art-ts.
//
//   npx tsx train.mts            run it: 10 steps (STEPS=2 for a quick try; a re-run continues the model)
//   npx tsc --noEmit             type-check it
import { gatherTrajectoryGroups, LocalBackend, TrainableModel, Trajectory, TrajectoryGroup } from "art-ts";

const baseModel = process.env.ART_BASE_MODEL ?? "HuggingFaceTB/SmolLM2-135M-Instruct";
const steps = Number(process.env.STEPS ?? 10);

// Starts .venv/bin/art-server (or ART_SERVER_COMMAND) on a free port; data and logs go to ./.art.
const backend = await LocalBackend.start({ baseModel });
const model = new TrainableModel({ name: "even-digit", project: "my-agent", baseModel });
await model.register(backend);
const client = model.openai(); // the official openai client, pointed at the server

async function rollout(seed: number): Promise<Trajectory> {
  const trajectory = new Trajectory({
    messagesAndChoices: [{ role: "user", content: "Name one digit from 0 to 9. Reply with the digit only." }],
  });
  const completion = await client.chat.completions.create({
    model: model.inferenceName(), messages: trajectory.messages(), max_tokens: 8, seed,
  });
  trajectory.push(completion); // keeps the sampled token ids and logprobs for training
  const digit = (completion.choices[0]?.message.content ?? "").match(/\d/)?.[0];
  trajectory.reward = digit !== undefined && Number(digit) % 2 === 0 ? 1 : 0;
  trajectory.metrics.answered = digit !== undefined;
  return trajectory;
}

try {
  for (let step = 0; step < steps; step++) {
    // 4 groups of 8 rollouts: GRPO compares the rewards within each group.
    const groups = Array.from({ length: 4 }, (_, g) =>
      new TrajectoryGroup(Array.from({ length: 8 }, (_, i) => () => rollout(step * 100 + g * 10 + i))));
    const gathered = await gatherTrajectoryGroups(groups, { progress: false });
    const result = await model.train(gathered, { learningRate: 5e-4, progress: false });
    // A group whose rollouts all scored the same teaches GRPO nothing: the step then trains no group.
    console.log(`step ${result.fromStep} -> ${result.step}: reward ${result.metrics.reward?.toFixed(3)}, ` +
      `answered ${Number(result.metrics.answered).toFixed(2)}, groups trained ${result.metrics.groupsTrained ?? 0}/${result.metrics.groups ?? 0}`);
  }
} finally {
  await backend.close();
}
