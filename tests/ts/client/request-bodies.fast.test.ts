// The client's request bodies against the server's published schema. lib/core/openapi.gen.ts holds
// the types openapi-typescript generates from docs/openapi.json (`npm run docs`, kept current by
// docs/api-reference.test.ts), and lib/client/model.ts builds each body it sends to a training
// route as one of them (`satisfies TrainBody`, ...), so `tsc` (the typecheck stage) fails on a body
// the server would not take. The @ts-expect-error lines show the check has teeth: each is a body the
// server refuses, and tsc fails if it ever accepts one. The runtime tests: what the types cannot
// see (a user's data) is checked before it is sent, with an error that names it.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { DeleteCheckpointsBody, LogBody, RegisterBody, SftBody, TrainBody } from "../../../lib/core/wire";
import { BadTrajectoryError, TrainableModel } from "../../../lib/index";

const user = { role: "user" as const, content: "hi" };
const assistant = { role: "assistant" as const, content: "hello" };

// What the server takes compiles:
export const accepted: [RegisterBody, TrainBody, SftBody, LogBody, DeleteCheckpointsBody] = [
  { name: "agent", project: "p", base_model: "builtin:tiny", lora: { r: 8, target_modules: ["q_proj"] } },
  { groups: [[{ messages_and_choices: [user, assistant], reward: 1 }]], config: { learning_rate: 1e-5 } },
  { conversations: [{ messages: [user, assistant] }], config: { epochs: 1 } },
  { groups: [[{ messages_and_choices: [user], reward: 0 }]], split: "val" },
  { keep_best_by: "val/reward" },
];

// ... and what it refuses does not:
export const refused = [
  // @ts-expect-error the wire is snake_case: base_model, not baseModel
  { name: "agent", project: "p", baseModel: "builtin:tiny" } satisfies RegisterBody,
  // @ts-expect-error a GRPO option the server does not have
  { groups: [], config: { learningRate: 1e-5 } } satisfies TrainBody,
  // @ts-expect-error learning_rate is a number
  { groups: [], config: { learning_rate: "high" } } satisfies TrainBody,
  // @ts-expect-error a message role the server does not know
  { conversations: [{ messages: [{ role: "function", content: "x" }, assistant] }] } satisfies SftBody,
  // @ts-expect-error the server takes function tools only
  { conversations: [{ messages: [user, assistant], tools: [{ type: "custom", custom: { name: "x" } }] }] } satisfies SftBody,
];

describe("a body the server would refuse is refused before it is sent", () => {
  const model = new TrainableModel({ name: "agent", project: "p" });

  async function refusal(data: unknown): Promise<string> {
    try {
      await model.trainSft(data as never);
    } catch (error) {
      assert.ok(error instanceof BadTrajectoryError, String(error));
      return error.message;
    }
    throw new Error("no BadTrajectoryError");
  }

  it("names the conversation and the field of a message or tool the server cannot take", async () => {
    assert.equal(await refusal([{ messages: [user, assistant] }, { messages: [{ role: "function", name: "f", content: "x" }, assistant] }]),
      'model.trainSft: conversation 1, messages.0.role: Invalid option: expected one of "system"|"developer"|"user"|"assistant"|"tool"');
    assert.equal(await refusal([{ messages: [user, assistant], tools: [{ type: "custom", custom: { name: "x" } }] }]),
      'model.trainSft: conversation 0, tools.0.type: Invalid input: expected "function"');
  });
});
