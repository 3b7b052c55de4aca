// The `openai` client class the OpenAI Agents SDK uses itself. In a project of your own this file is
// not needed: install the `openai` major the SDK uses (`npm install openai@^7`; art-ts keeps its own
// `openai` 6 in its folder) and `import OpenAI from "openai"` is the SDK's class (tests/ts/package
// type-checks exactly that). In this repository the root `openai` is art-ts's own major version, so
// the examples and tests take the SDK's copy from where the SDK resolves it.
import { createRequire } from "node:module";
import type { OpenAIClient } from "@openai/agents-openai";

type ClientOptions = { baseURL: string; apiKey: string; fetch: typeof fetch };
const fromAgents = createRequire(require.resolve("@openai/agents-openai"));

export const AgentsOpenAI = (fromAgents("openai") as { OpenAI: new (options: ClientOptions) => OpenAIClient }).OpenAI;
