// Rollout capture against the real server on builtin:tiny: calls made through model.openai() or
// model.fetch inside model.rollout land in the trajectory with their token ids (JSON and streamed),
// parallel rollouts do not mix, calls outside a rollout are not recorded, and a tool-using agent
// written with the plain `openai` client (streaming) is captured and trained without a single push.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import OpenAI from "openai";
import {
  LocalBackend, Model, TrainableModel, Trajectory, TrajectoryGroup, type MessageParam, type ToolParam,
} from "../../../lib/index";
import { ANSWER, INSTRUCTIONS, plan, QUESTION, teachToolUse, toolCode, TOOL_DESCRIPTIONS } from "../support/agent-task";
import { ROOT } from "../support/helpers";

const ask = (content: string): MessageParam[] => [{ role: "user", content }];

describe("model.rollout on a LocalBackend", () => {
  let dataDir: string;
  let backend: LocalBackend;
  let model: TrainableModel;

  before(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "art-capture-"));
    backend = await LocalBackend.start({ dataDir, baseModel: "builtin:tiny", engine: "hf", device: "cpu" });
    model = new TrainableModel({ name: "captured", project: "capture-tests", baseModel: "builtin:tiny" });
    await model.register(backend);
  });
  after(async () => {
    await backend?.close();
  });

  it("records JSON and streamed calls in order with the same token ids, and pushes nothing twice", async () => {
    const client = model.openai();
    const request = { model: model.inferenceName(), messages: ask("Name a corner."), max_tokens: 6, temperature: 0 };
    let pushed: OpenAI.Chat.Completions.ChatCompletion | undefined;
    const t = await model.rollout(async (t) => {
      pushed = await client.chat.completions.create(request);
      t.push(pushed); // already recorded: kept once
      const stream = await client.chat.completions.create({ ...request, stream: true });
      for await (const _chunk of stream) { /* the caller reads it as usual */ }
      t.reward = 1;
    });
    const [json, streamed] = t.choices();
    assert.equal(t.choices().length, 2);
    assert.equal(json!.completionId, pushed!.id);
    assert.ok(json!.tokenIds.length > 0 && json!.promptTokenIds.length > 0);
    assert.deepEqual(streamed!.tokenIds, json!.tokenIds);
    assert.deepEqual(streamed!.promptTokenIds, json!.promptTokenIds);
    assert.equal(streamed!.logprobs.length, streamed!.tokenIds.length);
    assert.match(streamed!.provenance ?? "", /^art1:/);
    // Each turn carries the sampling parameters it was drawn with (the request's, else the server's defaults).
    for (const choice of [json!, streamed!]) assert.deepEqual(choice.sampling, { temperature: 0, topP: 1, topK: 0, minP: 0, constrained: false, engine: "hf" });
    assert.equal(streamed!.choice.message.content, json!.choice.message.content);
    // The second call sent the same one user message: it does not continue the first conversation (no assistant
    // turn in it), so it starts a segment of its own.
    assert.deepEqual(t.messages().map((m) => m.role), ["user", "assistant", "user", "assistant"]);
    const result = await model.train([new TrajectoryGroup([t, new Trajectory({ messagesAndChoices: [...t.messagesAndChoices], reward: 0 })])], { progress: false });
    assert.equal(result.step, 1);
    assert.equal(result.metrics.sequencesSplit, 2);
  });

  it("keeps parallel rollouts apart, and does not record calls outside a rollout or to another model", async () => {
    const client = model.openai();
    const other = new Model({ name: model.inferenceName(), baseURL: model.baseURL, apiKey: model.apiKey });
    const trajectories = await Promise.all(Array.from({ length: 8 }, (_, i) => model.rollout(async () => {
      await new Promise((r) => setTimeout(r, (8 - i) * 5)); // finish in another order than they started
      await client.chat.completions.create({ model: model.inferenceName(), messages: ask(`Question ${i}?`), max_tokens: 3 });
      await other.openai().chat.completions.create({ model: model.inferenceName(), messages: ask("not mine"), max_tokens: 2 });
      await client.chat.completions.create({ model: model.inferenceName(), messages: ask(`Again ${i}?`), max_tokens: 3 });
    })));
    trajectories.forEach((t, i) => {
      assert.deepEqual(t.messages().filter((m) => m.role === "user").map((m) => m.content), [`Question ${i}?`, `Again ${i}?`]);
      assert.equal(t.choices().length, 2);
    });
    const outside = await client.chat.completions.create({ model: model.inferenceName(), messages: ask("free"), max_tokens: 2 });
    assert.ok(outside.choices[0]);
    // A baseline's rollout records its calls as plain assistant messages (no token ids from another endpoint).
    const baseline = await other.rollout(async () => {
      await other.openai().chat.completions.create({ model: model.inferenceName(), messages: ask("baseline"), max_tokens: 2 });
    });
    assert.deepEqual(baseline.messages().map((m) => m.role), ["user", "assistant"]);
    assert.equal(baseline.choices().length, 0);
  });

  it("records each model's calls in its own innermost rollout when rollouts of two models nest", async () => {
    const judge = new Model({ name: model.inferenceName(), baseURL: model.baseURL, apiKey: model.apiKey });
    let inner: Trajectory | undefined;
    const outer = await model.rollout(async () => {
      inner = await judge.rollout(async () => {
        await model.openai().chat.completions.create({ model: model.inferenceName(), messages: ask("outer's call"), max_tokens: 2 });
        await judge.openai().chat.completions.create({ model: model.inferenceName(), messages: ask("inner's call"), max_tokens: 2 });
      });
      await model.openai().chat.completions.create({ model: model.inferenceName(), messages: ask("outer again"), max_tokens: 2 });
    });
    assert.deepEqual(outer.messages().filter((m) => m.role === "user").map((m) => m.content), ["outer's call", "outer again"]);
    assert.equal(outer.choices().length, 2);
    assert.deepEqual(inner!.messages().filter((m) => m.role === "user").map((m) => m.content), ["inner's call"]);
  });

  it("drops a call still running when the rollout function returns, and says so in the trajectory's logs", async () => {
    let late: Promise<unknown> | undefined;
    const t = await model.rollout(async () => {
      await model.openai().chat.completions.create({ model: model.inferenceName(), messages: ask("awaited"), max_tokens: 2 });
      late = model.openai().chat.completions.create({ model: model.inferenceName(), messages: ask("not awaited"), max_tokens: 8 });
    });
    const before = JSON.stringify(t.messagesAndChoices);
    const answer = (await late) as OpenAI.Chat.Completions.ChatCompletion;
    assert.ok(answer.choices[0], "the caller still gets its answer");
    assert.equal(JSON.stringify(t.messagesAndChoices), before, "nothing lands in the trajectory after the rollout returned");
    assert.equal(t.choices().length, 1);
    // Said once, whether the call had reached the fetch when the function returned or only after.
    assert.equal(t.logs.filter((line) => /not recorded\. Await every call inside the rollout/.test(line)).length, 1, t.logs.join("\n"));
    // A stream the rollout started but did not read to its end is still running when it returns.
    let unread: AsyncIterable<unknown> | undefined;
    const opened = await model.rollout(async () => {
      unread = await model.openai().chat.completions.create({ model: model.inferenceName(), messages: ask("stream"), max_tokens: 8, stream: true });
    });
    for await (const _chunk of unread!) { /* read after the rollout: not recorded */ }
    assert.equal(opened.choices().length, 0);
    assert.ok(opened.logs.some((line) => /^1 model call\(s\) still running .* not recorded/.test(line)), opened.logs.join("\n"));
    // A rollout whose calls all finished says nothing.
    const clean = await model.rollout(async () => {
      await model.openai().chat.completions.create({ model: model.inferenceName(), messages: ask("awaited"), max_tokens: 2 });
    });
    assert.deepEqual(clean.logs, []);
  });

  it("records through model.fetch for any client, and not a call the server refused", async () => {
    const client = new OpenAI({ baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch });
    const t = await model.rollout(async () => {
      await assert.rejects(client.chat.completions.create({ model: "nobody", messages: ask("x"), max_tokens: 2 }), /404|not/);
      await client.chat.completions.create({ model: model.inferenceName(), messages: ask("y"), max_tokens: 2 });
    });
    assert.deepEqual(t.messages().map((m) => m.role), ["user", "assistant"]);
    assert.equal(t.choices().length, 1);
  });

  it("says at debug level (NODE_DEBUG=art) that a call outside a rollout is not recorded", () => {
    const script = `
      const { RemoteBackend, TrainableModel } = require(${JSON.stringify(path.join(ROOT, "lib", "index"))});
      (async () => {
        const model = new TrainableModel({ name: "captured", project: "capture-tests", baseModel: "builtin:tiny" });
        await model.register(new RemoteBackend({ url: ${JSON.stringify(backend.url)}, token: ${JSON.stringify(backend.token)} }));
        await model.openai().chat.completions.create({ model: "captured", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
      })();`;
    const run = spawnSync(process.execPath, ["--import", "tsx", "-e", script], { cwd: ROOT, env: { ...process.env, NODE_DEBUG: "art" }, encoding: "utf8" });
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stderr, /ART \d+: captured: a chat completion outside any rollout of this model: not recorded/);
  });

  it("captures a streaming tool-using agent written with the openai client, and trains on it", async () => {
    const agentModel = new TrainableModel({ name: "openai-agent", project: "capture-tests", baseModel: "builtin:tiny" });
    await agentModel.register(backend);
    const tools: ToolParam[] = (["add", "multiply"] as const).map((name) => ({
      type: "function",
      function: { name, description: TOOL_DESCRIPTIONS[name], parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] } },
    }));
    // The agent knows nothing of trajectories: it streams each answer, runs the tools it asks for, and loops.
    async function agent(client: OpenAI): Promise<string | null> {
      const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: "system", content: INSTRUCTIONS }, { role: "user", content: QUESTION }];
      for (let turn = 0; turn < 4; turn++) {
        const stream = client.chat.completions.stream({ model: agentModel.inferenceName(), messages, tools, temperature: 0, max_tokens: 40 });
        const message = (await stream.finalChatCompletion()).choices[0]!.message;
        messages.push({ role: "assistant", content: message.content, ...(message.tool_calls?.length ? { tool_calls: message.tool_calls } : {}) });
        if (!message.tool_calls?.length) return message.content;
        for (const call of message.tool_calls) {
          if (call.type !== "function") continue;
          const code = toolCode[call.function.name as keyof typeof toolCode];
          let output: string;
          try {
            output = code ? code(JSON.parse(call.function.arguments)) : `unknown tool ${call.function.name}`;
          } catch (error) {
            output = `error: ${(error as Error).message}`;
          }
          messages.push({ role: "tool", tool_call_id: call.id, content: output });
        }
      }
      return null;
    }
    const client = agentModel.openai();
    const run = () => agentModel.rollout(async (t) => {
      const answer = await agent(client);
      t.reward = answer?.includes("35") ? 1 : 0;
    });
    const { trajectory } = await teachToolUse(agentModel, run);
    assert.deepEqual(plan(trajectory), { calls: [["add"], ["multiply"], []], answer: ANSWER });
    assert.deepEqual(trajectory.messages().map((m) => m.role), ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]);
    assert.deepEqual(trajectory.messages().filter((m) => m.role === "tool").map((m) => m.content), ["7", "35"]);
    assert.deepEqual(trajectory.tools?.map((tool) => (tool as { function: { name: string } }).function.name), ["add", "multiply"]);
    for (const choice of trajectory.choices()) assert.ok(choice.tokenIds.length > 0 && choice.logprobs.length === choice.tokenIds.length);
    const group = new TrajectoryGroup([trajectory, await run()]);
    group.trajectories[1]!.reward = 0;
    const result = await agentModel.train([group], { progress: false });
    assert.equal(result.metrics.sequencesSplit, 0); // each call continued the previous one: one sequence per trajectory
    assert.ok(Number(result.metrics.tokensTrained) > 0);
  });
});
