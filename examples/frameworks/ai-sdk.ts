// An agent written with the Vercel AI SDK: generateText with a tool over several steps. The
// provider takes the model's base URL, key and fetch; inside model.rollout its calls are captured.
// (Mastra takes an AI SDK provider the same way.)
//
//   npx tsx examples/frameworks/ai-sdk.ts
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";
import { LOOKUP, SYSTEM, trainAgent, type Agent } from "./task";

const agent: Agent = async ({ model, lookupTown }, question) => {
  const provider = createOpenAICompatible({ name: "art", baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch });
  const { text } = await generateText({
    model: provider(model.inferenceName()),
    system: SYSTEM,
    prompt: question,
    tools: { [LOOKUP.name]: tool({ description: LOOKUP.description, inputSchema: z.object({ name: z.string() }), execute: ({ name }) => lookupTown(name) }) },
    stopWhen: stepCountIs(3),
    maxOutputTokens: 48,
  });
  return text;
};

void trainAgent("ai-sdk-agent", agent);
