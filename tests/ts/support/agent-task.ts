// The task every framework test runs: "What is (3 + 4) * 5?" with two tools, add and multiply, in
// three calls (add, multiply, answer). builtin:tiny has random weights, so `teachToolUse` first
// teaches it the plan by SFT on the framework's own requests: run the agent, take each call the
// framework actually sent, train the scripted answer for it, and run again, until the agent (the
// real framework, driving the real server) follows the plan end to end.
import assert from "node:assert/strict";
import {
  isSampledChoice, TrainableModel, TrajectoryGroup, type Conversation, type LocalBackend, type MessageParam, type Trajectory,
} from "../../../lib/index";

export const QUESTION = "What is (3 + 4) * 5? Use the tools.";
export const INSTRUCTIONS = "You are a careful calculator. Use the tools for every operation.";
export const ANSWER = "The answer is 35.";

/** The tools' own code, shared by every framework's tool definitions. */
export const toolCode = {
  add: ({ a, b }: { a: number; b: number }) => String(a + b),
  multiply: ({ a, b }: { a: number; b: number }) => String(a * b),
};
export const TOOL_DESCRIPTIONS = { add: "Adds two numbers.", multiply: "Multiplies two numbers." };

/** The assistant turn the plan wants at each call. */
const SCRIPT: MessageParam[] = [
  { role: "assistant", content: null, tool_calls: [{ id: "call_add", type: "function", function: { name: "add", arguments: '{"a": 3, "b": 4}' } }] },
  { role: "assistant", content: null, tool_calls: [{ id: "call_mul", type: "function", function: { name: "multiply", arguments: '{"a": 7, "b": 5}' } }] },
  { role: "assistant", content: ANSWER },
];

/** The names of the tools each sampled turn called, and the last turn's text. */
export function plan(t: Trajectory): { calls: string[][]; answer: string | null } {
  const choices = t.choices();
  return {
    calls: choices.map((c) => (c.choice.message.tool_calls ?? []).map((call) => (call as { function: { name: string } }).function.name)),
    answer: choices[choices.length - 1]?.choice.message.content ?? null,
  };
}

function followsScript(t: Trajectory): boolean {
  const { calls, answer } = plan(t);
  return JSON.stringify(calls) === JSON.stringify([["add"], ["multiply"], []]) && (answer ?? "").includes("35");
}

/**
 * Teaches `model` the plan through the framework run by `runAgent` (one rollout per call), and
 * returns the first trajectory that follows it. Each round adds, for each call the framework sent,
 * the conversation up to that call plus the scripted turn; SFT trains on all of them.
 */
export async function teachToolUse(model: TrainableModel, runAgent: () => Promise<Trajectory>): Promise<{ trajectory: Trajectory; rounds: number }> {
  const lessons = new Map<string, Conversation>();
  for (let round = 0; round < 6; round++) {
    const trajectory = await runAgent();
    if (followsScript(trajectory)) return { trajectory, rounds: round };
    const messages = trajectory.messages();
    let k = 0;
    trajectory.messagesAndChoices.forEach((item, i) => {
      if (!isSampledChoice(item)) return;
      const step = SCRIPT[k++];
      if (!step) return;
      const lesson: Conversation = { messages: [...messages.slice(0, i), step], ...(trajectory.tools ? { tools: trajectory.tools } : {}) };
      lessons.set(JSON.stringify(lesson), lesson);
    });
    await model.trainSft([...lessons.values()], { learningRate: 2e-2, epochs: 40, batchSize: lessons.size, progress: false });
  }
  assert.fail(`${model.name} did not learn the plan in 6 rounds`);
}

/**
 * Teaches a fresh model the task through `agent` (a framework's agent, returning its final text),
 * checks the capture (one conversation, every call with token ids, the tool results between them)
 * and trains one GRPO step on it.
 */
export async function checkAgent(backend: LocalBackend, name: string, agent: (model: TrainableModel) => Promise<string>): Promise<{ trajectory: Trajectory; model: TrainableModel }> {
  const model = new TrainableModel({ name, project: "frameworks", baseModel: "builtin:tiny" });
  await model.register(backend);
  const run = () => model.rollout(async (t) => {
    const answer = await agent(model);
    t.reward = answer.includes("35") ? 1 : 0;
  });
  const { trajectory } = await teachToolUse(model, run);
  assert.deepEqual(plan(trajectory), { calls: [["add"], ["multiply"], []], answer: ANSWER });
  const messages = trajectory.messages();
  assert.deepEqual(messages.filter((m) => m.role === "user").map((m) => m.content), [QUESTION], "one conversation, not one per call");
  assert.deepEqual(messages.filter((m) => m.role === "tool").map((m) => String(m.content).replace(/"/g, "")), ["7", "35"]);
  for (const choice of trajectory.choices()) assert.ok(choice.tokenIds.length > 0 && choice.logprobs.length === choice.tokenIds.length);
  assert.equal(trajectory.reward, 1);
  const other = await run();
  other.reward = 0;
  const step = await model.getStep();
  const result = await model.train([new TrajectoryGroup([trajectory, other])], { progress: false });
  assert.equal(result.step, step + 1);
  assert.equal(result.metrics.trajectoriesTrained, 2);
  assert.equal(result.metrics.sequencesSplit, 0, "each call continues the one before: one sequence per trajectory");
  return { trajectory, model };
}
