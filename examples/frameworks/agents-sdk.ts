// An agent written with the OpenAI Agents SDK, on its chat-completions model over an `openai` client
// that uses the model's base URL, key and fetch; tracing off (it would send spans to OpenAI).
//
//   npx tsx examples/frameworks/agents-sdk.ts
import { Agent as SdkAgent, OpenAIChatCompletionsModel, run, setTracingDisabled, tool } from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";
import { LOOKUP, SYSTEM, trainAgent, type Agent } from "./task";

setTracingDisabled(true);

const agent: Agent = async ({ model, lookupTown }, question) => {
  const client = new OpenAI({ baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch });
  const sdkAgent = new SdkAgent({
    name: "towns",
    instructions: SYSTEM,
    // The Agents SDK may depend on another major version of `openai` than yours: the client is the same at run time.
    model: new OpenAIChatCompletionsModel(client as never, model.inferenceName()),
    modelSettings: { maxTokens: 48 },
    tools: [tool({ ...LOOKUP, parameters: z.object({ name: z.string() }), execute: ({ name }) => lookupTown(name) })],
  });
  const result = await run(sdkAgent, question, { maxTurns: 3 }).catch((error: Error) => ({ finalOutput: `(${error.name})` }));
  return String(result.finalOutput ?? "");
};

void trainAgent("agents-sdk-agent", agent);
