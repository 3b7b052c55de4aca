// The toy task of the quickstart and the client tests: "name an empty cell" of a tic-tac-toe
// board. Reward 1 when the answer names a cell that is empty, else 0.
import { rng, type TrainableModel, Trajectory } from "../lib/index";

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
