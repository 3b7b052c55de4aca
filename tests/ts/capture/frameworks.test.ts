// The agent frameworks, each its real package, driving the real server inside model.rollout: the
// Vercel AI SDK (generateText with tools over @ai-sdk/openai-compatible), the OpenAI Agents SDK (its
// chat-completions model, tracing off) and LangGraph.js (the prebuilt ReAct agent over
// @langchain/openai). Each runs the two-tool, three-call task of agent-task.ts; the captured
// trajectory holds every call with token ids and the tool results between them, and a GRPO step
// trains on it. (The plain `openai` client's agent is in capture.test.ts.)
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import { LocalBackend, TrainableModel } from "../../../lib/index";
import { checkAgent, INSTRUCTIONS, QUESTION, toolCode, TOOL_DESCRIPTIONS } from "../support/agent-task";

const numbers = z.object({ a: z.number(), b: z.number() });

describe("agent frameworks captured by model.rollout", () => {
  let dataDir: string;
  let backend: LocalBackend;

  before(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "art-frameworks-"));
    backend = await LocalBackend.start({ dataDir, baseModel: "builtin:tiny", engine: "hf", device: "cpu" });
  });
  after(async () => {
    await backend?.close();
  });

  const checkFramework = (name: string, agent: (model: TrainableModel) => Promise<string>) => checkAgent(backend, name, agent);

  it("the Vercel AI SDK: generateText with two tools over several steps", async () => {
    const { generateText, stepCountIs, tool } = await import("ai");
    const { createOpenAICompatible } = await import("@ai-sdk/openai-compatible");
    await checkFramework("ai-sdk", async (model) => {
      const provider = createOpenAICompatible({ name: "art", baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch });
      const { text } = await generateText({
        model: provider(model.inferenceName()),
        system: INSTRUCTIONS,
        prompt: QUESTION,
        tools: {
          add: tool({ description: TOOL_DESCRIPTIONS.add, inputSchema: numbers, execute: async (input) => toolCode.add(input) }),
          multiply: tool({ description: TOOL_DESCRIPTIONS.multiply, inputSchema: numbers, execute: async (input) => toolCode.multiply(input) }),
        },
        stopWhen: stepCountIs(4),
        temperature: 0,
        maxOutputTokens: 40,
      });
      return text;
    });
  });

  it("the Vercel AI SDK: streamText is captured with the same tokens as generateText", async () => {
    const { generateText, streamText } = await import("ai");
    const { createOpenAICompatible } = await import("@ai-sdk/openai-compatible");
    const model = new TrainableModel({ name: "ai-sdk-stream", project: "frameworks", baseModel: "builtin:tiny" });
    await model.register(backend);
    const provider = createOpenAICompatible({ name: "art", baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch });
    const settings = { model: provider(model.inferenceName()), prompt: QUESTION, temperature: 0, maxOutputTokens: 12 };
    const generated = await model.rollout(async () => {
      await generateText(settings);
    });
    let streamedText = "";
    const streamed = await model.rollout(async () => {
      const result = streamText(settings);
      for await (const piece of result.textStream) streamedText += piece;
    });
    const [a] = generated.choices();
    const [b] = streamed.choices();
    assert.ok(a && b && a.tokenIds.length > 0);
    assert.deepEqual(b.tokenIds, a.tokenIds);
    assert.deepEqual(b.promptTokenIds, a.promptTokenIds);
    assert.equal(b.logprobs.length, b.tokenIds.length);
    assert.equal(b.choice.message.content, streamedText);
  });

  it("the Agents SDK and LangChain: a streamed call is captured with the same tokens as a plain one", async () => {
    const { Agent, OpenAIChatCompletionsModel, run, setTracingDisabled } = await import("@openai/agents");
    const { ChatOpenAI } = await import("@langchain/openai");
    const { default: OpenAI } = await import("openai");
    setTracingDisabled(true);
    const model = new TrainableModel({ name: "streams", project: "frameworks", baseModel: "builtin:tiny" });
    await model.register(backend);
    const tokensOf = async (fn: () => Promise<unknown>) => {
      const t = await model.rollout(fn);
      assert.equal(t.choices().length, 1, JSON.stringify(t.messages()));
      const [choice] = t.choices();
      assert.equal(choice!.logprobs.length, choice!.tokenIds.length);
      return { ids: choice!.tokenIds, prompt: choice!.promptTokenIds, text: choice!.choice.message.content };
    };

    const client = new OpenAI({ baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch });
    const agent = new Agent({
      name: "plain", instructions: INSTRUCTIONS, modelSettings: { temperature: 0, maxTokens: 10 },
      model: new OpenAIChatCompletionsModel(client as never, model.inferenceName()),
    });
    const plainAgent = await tokensOf(() => run(agent, QUESTION));
    const streamedAgent = await tokensOf(async () => {
      const result = await run(agent, QUESTION, { stream: true });
      await result.completed;
    });
    assert.deepEqual(streamedAgent, plainAgent);

    const llm = new ChatOpenAI({ model: model.inferenceName(), apiKey: model.apiKey, temperature: 0, maxTokens: 10, configuration: { baseURL: model.baseURL, fetch: model.fetch } });
    const plainChain = await tokensOf(() => llm.invoke(QUESTION));
    let streamedText = "";
    const streamedChain = await tokensOf(async () => {
      for await (const chunk of await llm.stream(QUESTION)) streamedText += String(chunk.content);
    });
    assert.deepEqual(streamedChain, plainChain);
    assert.equal(streamedText, plainChain.text);
  });

  it("the OpenAI Agents SDK: an Agent on its chat-completions model, tracing off", async () => {
    const { Agent, OpenAIChatCompletionsModel, run, setTracingDisabled, tool } = await import("@openai/agents");
    const { default: OpenAI } = await import("openai");
    setTracingDisabled(true);
    await checkFramework("agents-sdk", async (model) => {
      const client = new OpenAI({ baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch });
      const agent = new Agent({
        name: "calculator",
        instructions: INSTRUCTIONS,
        model: new OpenAIChatCompletionsModel(client as never, model.inferenceName()),
        modelSettings: { temperature: 0, maxTokens: 40 },
        tools: [
          tool({ name: "add", description: TOOL_DESCRIPTIONS.add, parameters: numbers, execute: async (input) => toolCode.add(input) }),
          tool({ name: "multiply", description: TOOL_DESCRIPTIONS.multiply, parameters: numbers, execute: async (input) => toolCode.multiply(input) }),
        ],
      });
      const result = await run(agent, QUESTION, { maxTurns: 4 });
      return String(result.finalOutput ?? "");
    });
  });

  it("LangGraph.js: the prebuilt ReAct agent over @langchain/openai", async () => {
    const { createReactAgent } = await import("@langchain/langgraph/prebuilt");
    const { ChatOpenAI } = await import("@langchain/openai");
    const { tool } = await import("@langchain/core/tools");
    await checkFramework("langgraph", async (model) => {
      const llm = new ChatOpenAI({
        model: model.inferenceName(), apiKey: model.apiKey, temperature: 0, maxTokens: 40,
        configuration: { baseURL: model.baseURL, fetch: model.fetch },
      });
      const agent = createReactAgent({
        llm,
        prompt: INSTRUCTIONS,
        tools: [
          tool(async (input: { a: number; b: number }) => toolCode.add(input), { name: "add", description: TOOL_DESCRIPTIONS.add, schema: numbers }),
          tool(async (input: { a: number; b: number }) => toolCode.multiply(input), { name: "multiply", description: TOOL_DESCRIPTIONS.multiply, schema: numbers }),
        ],
      });
      const state = await agent.invoke({ messages: [{ role: "user", content: QUESTION }] }, { recursionLimit: 10 });
      const last = state.messages[state.messages.length - 1];
      return typeof last?.content === "string" ? last.content : JSON.stringify(last?.content ?? "");
    });
  });
});
