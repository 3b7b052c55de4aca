// What every framework example shares: a server, the towns MCP server (notebooks/mcp/), a
// question, a reward, and the training loop. Each example only supplies its agent: a function that
// answers a question with its framework, given the model's endpoint. The loop runs it inside
// model.rollout, so the framework's calls are captured without the agent knowing.
//
//   ART_BASE_MODEL=builtin:tiny ART_STEPS=1 npx tsx examples/frameworks/ai-sdk.ts    a quick try
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { DEFAULT_BASE_MODEL, gatherTrajectoryGroups, LocalBackend, McpTools, TrainableModel, TrajectoryGroup } from "../../lib/index";

export const SYSTEM = "You answer questions about towns. Always look the town up with the lookup_town tool first, then answer with the number.";
/** The tool the agents offer, described once; each framework wraps it in its own tool type. */
export const LOOKUP = { name: "lookup_town", description: "Looks up a town by name: its population and the year it was founded." };

/** What an example's agent gets: the model to call, and the MCP tool to run. */
export interface AgentContext {
  model: TrainableModel;
  lookupTown: (name: string) => Promise<string>;
}

/** An agent answers one question with its framework and returns its final text. */
export type Agent = (context: AgentContext, question: string) => Promise<string>;

/** Trains `agent` for ART_STEPS steps (default 10) of 2 questions x 4 rollouts, printing each step. */
export async function trainAgent(name: string, agent: Agent): Promise<void> {
  const baseModel = process.env.ART_BASE_MODEL ?? DEFAULT_BASE_MODEL;
  const steps = Number(process.env.ART_STEPS ?? 10);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `art-${name}-`));
  const backend = await LocalBackend.start({ baseModel, dataDir });
  const mcp = await McpTools.stdio({ command: process.execPath, args: [path.join(__dirname, "..", "..", "notebooks", "mcp", "towns-server.mjs")] });
  try {
    const model = new TrainableModel({ name, project: "examples", baseModel });
    await model.register(backend);
    const context: AgentContext = { model, lookupTown: async (town) => (await mcp.call("lookup_town", { name: town })).text };
    const towns = (await mcp.call("list_towns")).text.split(", ");
    for (let step = 0; step < steps; step++) {
      const groups = [0, 1].map((g) => {
        const town = towns[(step * 2 + g) % towns.length]!;
        return new TrajectoryGroup(Array.from({ length: 4 }, () => () => model.rollout(async (t) => {
          const answer = (await context.lookupTown(town)).match(/population (\d+)/)![1]!;
          const text = await agent(context, `What is the population of ${town}?`);
          // The captured trajectory shows what the framework did: here, whether a tool result came back.
          const usedTool = t.messages().some((m) => m.role === "tool");
          t.reward = text.replace(/,/g, "").includes(answer) ? 1 : usedTool ? 0.3 : 0;
          t.metrics = { correct: t.reward === 1, usedTool, modelCalls: t.choices().length };
        })));
      });
      const gathered = await gatherTrajectoryGroups(groups, { progress: false });
      const result = await model.train(gathered, { learningRate: 3e-4, progress: false });
      console.log(`${name} step ${result.fromStep} -> ${result.step}: reward ${Number(result.metrics.reward).toFixed(3)}, ` +
        `tool used ${Number(result.metrics.usedTool).toFixed(2)}, model calls per rollout ${Number(result.metrics.modelCalls).toFixed(1)}`);
    }
  } finally {
    await mcp.close();
    await backend.close();
  }
}
