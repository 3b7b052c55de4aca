// An agent written with LangGraph.js: the prebuilt ReAct agent over @langchain/openai's ChatOpenAI,
// whose `configuration` takes the model's base URL and fetch.
//
//   npx tsx examples/frameworks/langgraph.ts
import { tool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import { LOOKUP, SYSTEM, trainAgent, type Agent } from "./task";

const agent: Agent = async ({ model, lookupTown }, question) => {
  const llm = new ChatOpenAI({ model: model.inferenceName(), apiKey: model.apiKey, maxTokens: 48, configuration: { baseURL: model.baseURL, fetch: model.fetch } });
  const graph = createReactAgent({
    llm,
    prompt: SYSTEM,
    tools: [tool(async ({ name }: { name: string }) => lookupTown(name), { ...LOOKUP, schema: z.object({ name: z.string() }) })],
  });
  const state = await graph.invoke({ messages: [{ role: "user", content: question }] }, { recursionLimit: 7 }).catch(() => ({ messages: [] }));
  const last = state.messages[state.messages.length - 1];
  return typeof last?.content === "string" ? last.content : "";
};

void trainAgent("langgraph-agent", agent);
