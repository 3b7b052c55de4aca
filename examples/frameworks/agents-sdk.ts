// An agent written with the OpenAI Agents SDK as it comes: its default model (the Responses API),
// over an `openai` client given the model's base URL, key and fetch (`setDefaultOpenAIClient`);
// tracing off (it would send spans to OpenAI). The SDK's chat-completions model works the same way.
//
//   npx tsx examples/frameworks/agents-sdk.ts
import { Agent as SdkAgent, run, setDefaultOpenAIClient, setTracingDisabled, tool } from "@openai/agents";
import { z } from "zod";
import { AgentsOpenAI as OpenAI } from "./agents-openai"; // in your project: import OpenAI from "openai";
import { LOOKUP, SYSTEM, trainAgent, type Agent } from "./task";

setTracingDisabled(true);

const agent: Agent = async ({ model, lookupTown }, question) => {
  setDefaultOpenAIClient(new OpenAI({ baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch }));
  const sdkAgent = new SdkAgent({
    name: "towns",
    instructions: SYSTEM,
    model: model.inferenceName(),
    modelSettings: { maxTokens: 48 },
    tools: [tool({ ...LOOKUP, parameters: z.object({ name: z.string() }), execute: ({ name }) => lookupTown(name) })],
  });
  // An answer cut at maxTokens ends the run with an error (as on OpenAI): its calls are captured all the same.
  const result = await run(sdkAgent, question, { maxTurns: 3 }).catch((error: Error) => ({ finalOutput: `(${error.name})` }));
  return String(result.finalOutput ?? "");
};

void trainAgent("agents-sdk-agent", agent);
