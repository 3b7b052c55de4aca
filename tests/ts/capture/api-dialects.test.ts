// Agents that speak the Responses API or Anthropic's Messages API, each through its real package,
// trained as they are: the OpenAI Agents SDK on its default (Responses) model, the AI SDK's OpenAI
// provider (Responses by default, and its chat model), Anthropic's SDK and the AI SDK's Anthropic
// provider. Each runs the two-tool, three-call task of agent-task.ts inside model.rollout; the
// captured trajectory holds every call with token ids and the tool results between them, a GRPO
// step trains on it, every call's prompt ids are those of the same conversation sent as a chat
// completion, and the agent streamed captures the same ids as the agent plain.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import { LocalBackend, type TrainableModel, type Trajectory } from "../../../lib/index";
import { checkAgent, INSTRUCTIONS, QUESTION, toolCode, TOOL_DESCRIPTIONS } from "../support/agent-task";
import { AgentsOpenAI } from "../../../examples/frameworks/agents-openai";

const numbers = z.object({ a: z.number(), b: z.number() });
const jsonNumbers = { type: "object" as const, properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] };

describe("agents on the Responses API and the Messages API, captured by model.rollout", () => {
  let dataDir: string;
  let backend: LocalBackend;

  before(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "art-dialects-"));
    backend = await LocalBackend.start({ dataDir, baseModel: "builtin:tiny", engine: "hf", device: "cpu" });
  });
  after(async () => {
    await backend?.close();
  });

  /** Every sampled call of a rollout of `fn`: ids, prompt ids, text. */
  async function calls(model: TrainableModel, fn: () => Promise<unknown>) {
    const t: Trajectory = await model.rollout(fn);
    return t.choices().map((choice) => {
      assert.equal(choice.logprobs.length, choice.tokenIds.length);
      return { ids: choice.tokenIds, prompt: choice.promptTokenIds, text: choice.choice.message.content ?? null };
    });
  }

  /**
   * Trains the task through `agent` (checkAgent), checks that every call's prompt ids are those of
   * its conversation sent as a chat completion, and that the agent streamed samples what it sampled
   * plain.
   */
  async function checkDialect(name: string, agent: (model: TrainableModel, streamed: boolean) => Promise<string>): Promise<TrainableModel> {
    const { trajectory, model } = await checkAgent(backend, name, (m) => agent(m, false));
    let k = 0;
    for (const [i, item] of trajectory.messagesAndChoices.entries()) {
      if (!("kind" in item && item.kind === "choice")) continue;
      const messages = trajectory.messages().slice(0, i);
      const chat = await model.openai().chat.completions.create({ model: model.inferenceName(), messages, tools: trajectory.tools, max_tokens: 1 });
      assert.deepEqual((chat as unknown as { prompt_token_ids: number[] }).prompt_token_ids, item.promptTokenIds, `call ${k++}: the chat request's prompt ids`);
    }
    const plain = await calls(model, () => agent(model, false));
    const streamed = await calls(model, () => agent(model, true));
    assert.equal(plain.length, 3);
    assert.deepEqual(streamed, plain, "streamed and plain calls capture the same ids");
    return model;
  }

  it("the OpenAI Agents SDK on its default model (the Responses API): run and run with stream, with tools", async () => {
    const { Agent, run, setDefaultOpenAIClient, setTracingDisabled, tool } = await import("@openai/agents");
    setTracingDisabled(true);
    await checkDialect("agents-default", async (model, streamed) => {
      setDefaultOpenAIClient(new AgentsOpenAI({ baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch }));
      const agent = new Agent({
        name: "calculator", instructions: INSTRUCTIONS, model: model.inferenceName(), modelSettings: { temperature: 0, maxTokens: 40 },
        tools: [
          tool({ name: "add", description: TOOL_DESCRIPTIONS.add, parameters: numbers, execute: async (input) => toolCode.add(input) }),
          tool({ name: "multiply", description: TOOL_DESCRIPTIONS.multiply, parameters: numbers, execute: async (input) => toolCode.multiply(input) }),
        ],
      });
      try {
        if (!streamed) return String((await run(agent, QUESTION, { maxTurns: 4 })).finalOutput ?? "");
        const result = await run(agent, QUESTION, { maxTurns: 4, stream: true });
        await result.completed;
        return String(result.finalOutput ?? "");
      } catch (error) {
        // An answer cut at maxTokens ends the run (status "incomplete", as on OpenAI); its calls are recorded.
        if ((error as Error).name === "ModelBehaviorError") return "";
        throw error;
      }
    });
  });

  for (const api of ["responses", "chat"] as const) {
    it(`the AI SDK's OpenAI provider, its ${api === "responses" ? "default (Responses) model" : "chat model"}: generateText and streamText with tools`, async () => {
      const { generateText, stepCountIs, streamText, tool } = await import("ai");
      const { createOpenAI } = await import("@ai-sdk/openai");
      const tools = {
        add: tool({ description: TOOL_DESCRIPTIONS.add, inputSchema: numbers, execute: async (input) => toolCode.add(input) }),
        multiply: tool({ description: TOOL_DESCRIPTIONS.multiply, inputSchema: numbers, execute: async (input) => toolCode.multiply(input) }),
      };
      const model = await checkDialect(`ai-sdk-openai-${api}`, async (model, streamed) => {
        const provider = createOpenAI({ baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch });
        const settings = {
          model: api === "responses" ? provider(model.inferenceName()) : provider.chat(model.inferenceName()),
          system: INSTRUCTIONS, prompt: QUESTION, tools, stopWhen: stepCountIs(4), temperature: 0, maxOutputTokens: 40,
        };
        if (!streamed) return (await generateText(settings)).text;
        const result = streamText(settings);
        for await (const _ of result.textStream); // read to the end, as a UI would
        return result.text;
      });
      if (api === "chat") return;
      // A conversation that goes on: the Responses model refers to its earlier answer's text by id
      // (it assumes OpenAI stores responses); model.fetch puts the item back, as our server stores nothing.
      let references = 0;
      const fetch: typeof model.fetch = async (input, init) => {
        if (typeof init?.body === "string" && init.body.includes('"item_reference"')) references += 1;
        return model.fetch(input, init);
      };
      const languageModel = createOpenAI({ baseURL: model.baseURL, apiKey: model.apiKey, fetch })(model.inferenceName());
      const t = await model.rollout(async () => {
        const first = await generateText({ model: languageModel, prompt: "Say hello.", temperature: 0, maxOutputTokens: 8 });
        await generateText({ model: languageModel, temperature: 0, maxOutputTokens: 8,
          messages: [{ role: "user", content: "Say hello." }, ...first.response.messages, { role: "user", content: "Again." }] });
      });
      assert.ok(references > 0, "the AI SDK sent an item reference");
      assert.deepEqual(t.messagesAndChoices.map((item) => ("kind" in item ? "choice" : item.role)), ["user", "choice", "user", "choice"]);
    });
  }

  it("Anthropic's SDK: messages.create and messages.stream with tools", async () => {
    const { default: Anthropic } = await import("@anthropic-ai/sdk");
    const tools = [
      { name: "add", description: TOOL_DESCRIPTIONS.add, input_schema: jsonNumbers },
      { name: "multiply", description: TOOL_DESCRIPTIONS.multiply, input_schema: jsonNumbers },
    ];
    type Params = Parameters<InstanceType<typeof Anthropic>["messages"]["create"]>[0];
    // Greedy, so that a streamed run and a plain one sample the same: `temperature` left the SDK's
    // types (Anthropic deprecated it); the SDK still sends it and the Messages API takes it.
    const greedy = { temperature: 0 };
    await checkDialect("anthropic-sdk", async (model, streamed) => {
      const client = new Anthropic({ baseURL: model.serverURL, apiKey: model.apiKey, fetch: model.fetch });
      const messages: Params["messages"] = [{ role: "user", content: QUESTION }];
      for (let turn = 0; turn < 4; turn++) {
        const params: Params = { model: model.inferenceName(), system: INSTRUCTIONS, max_tokens: 40, ...greedy, tools, messages };
        const message = streamed ? await client.messages.stream(params).finalMessage() : await client.messages.create({ ...params, stream: false });
        messages.push({ role: "assistant", content: message.content });
        const uses = message.content.flatMap((block) => (block.type === "tool_use" ? [block] : []));
        if (message.stop_reason !== "tool_use" || !uses.length) {
          return message.content.map((block) => (block.type === "text" ? block.text : "")).join("");
        }
        messages.push({ role: "user", content: uses.map((use) => ({
          type: "tool_result" as const, tool_use_id: use.id, content: toolCode[use.name as "add"](use.input as { a: number; b: number }),
        })) });
      }
      return "";
    });
  });

  it("the AI SDK's Anthropic provider: generateText and streamText with tools", async () => {
    const { generateText, stepCountIs, streamText, tool } = await import("ai");
    const { createAnthropic } = await import("@ai-sdk/anthropic");
    const tools = {
      add: tool({ description: TOOL_DESCRIPTIONS.add, inputSchema: numbers, execute: async (input) => toolCode.add(input) }),
      multiply: tool({ description: TOOL_DESCRIPTIONS.multiply, inputSchema: numbers, execute: async (input) => toolCode.multiply(input) }),
    };
    await checkDialect("ai-sdk-anthropic", async (model, streamed) => {
      const settings = {
        model: createAnthropic({ baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch })(model.inferenceName()),
        system: INSTRUCTIONS, prompt: QUESTION, tools, stopWhen: stepCountIs(4), temperature: 0, maxOutputTokens: 40,
      };
      if (!streamed) return (await generateText(settings)).text;
      const result = streamText(settings);
      for await (const _ of result.textStream); // read to the end, as a UI would
      return result.text;
    });
  });
});
