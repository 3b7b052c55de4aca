// The toy task of the quickstart and the client tests: "name an empty cell" of a tic-tac-toe
// board. Reward 1 when the answer names a cell that is empty, else 0.
import { gatherTrajectoryGroups, rng, type TrainableModel, Trajectory, TrajectoryGroup } from "../lib/index";

export { rng };

export const CELLS = ["A1", "A2", "A3", "B1", "B2", "B3", "C1", "C2", "C3"];

export function randomBoard(random: () => number): Record<string, string> {
  return Object.fromEntries(CELLS.map((c) => [c, random() < 0.3 ? (random() < 0.5 ? "X" : "O") : "."]));
}

export async function rollout(model: TrainableModel, board: Record<string, string>, seed: number): Promise<Trajectory> {
  const rows = ["A", "B", "C"].map((r) => ["1", "2", "3"].map((c) => board[r + c]).join(" ")).join("\n");
  const trajectory = new Trajectory({
    messagesAndChoices: [
      { role: "system", content: "You play tic-tac-toe. Name an empty cell, like B2." },
      { role: "user", content: `Board:\n${rows}\nName an empty cell.` },
    ],
  });
  const completion = await model.openai().chat.completions.create({
    model: model.inferenceName(), messages: trajectory.messages(), max_tokens: 6, seed,
  });
  trajectory.push(completion);
  const text = completion.choices[0]?.message.content ?? "";
  const hit = CELLS.some((c) => text.includes(c) && board[c] === ".");
  trajectory.reward = hit ? 1 : 0;
  trajectory.metrics.hit = hit;
  return trajectory;
}

/** `steps` GRPO steps of 2 groups x 8 rollouts; returns the mean reward of each step's rollouts. */
export async function trainToyTask(model: TrainableModel, steps: number, learningRate: number, seed: number): Promise<number[]> {
  const random = rng(seed);
  const rewards: number[] = [];
  for (let step = 0; step < steps; step++) {
    const groups = Array.from({ length: 2 }, (_, g) => {
      const board = randomBoard(random);
      return new TrajectoryGroup(Array.from({ length: 8 }, (_, i) => () => rollout(model, board, seed * 10_000 + step * 100 + g * 10 + i)));
    });
    const gathered = await gatherTrajectoryGroups(groups, { progress: false });
    const all = gathered.flatMap((g) => g.trajectories.map((t) => t.reward));
    rewards.push(all.reduce((a, b) => a + b, 0) / all.length);
    await model.train(gathered, { learningRate, progress: false });
  }
  return rewards;
}
