/**
 * Training tasks written by a model from an MCP server's tools (ART's MCP•RL `generate_scenarios`):
 * no hand-written dataset. The generator is any chat model (the local one, or one with an API key);
 * its replies are validated with zod, malformed and duplicate tasks are dropped and asked for again,
 * and too few valid tasks after the retries is an error, never a short list.
 * @module
 */
import type OpenAI from "openai";
import { z } from "zod";
import type { ChatModel } from "../client/chat-model";
import { ArtError, ModelCallError } from "../core/errors";
import { functionOption, parseOptions } from "../core/options";
import { ProgressLine } from "../display/progress-line";
import type { McpToolInfo, McpTools } from "./mcp-tools";

/** A task for the agent, with how hard the generator judged it (1: one tool call; 5: several dependent calls and reasoning). */
export interface Scenario {
  /** What the user asks the agent, in their words. */
  task: string;
  /** 1 to 5. */
  difficulty: number;
}

/** What {@link generateScenarios} has done so far (its progress line shows the same). */
export interface ScenarioProgress {
  /** Valid, new scenarios kept. */
  kept: number;
  /** Scenarios asked for. */
  count: number;
  /** Generator calls made. */
  calls: number;
  /** Tasks dropped, by why. */
  dropped: {
    /** Replies with no JSON object of the asked shape (each counts once, whatever it held). */
    unreadable: number;
    /** Tasks not `{ task, difficulty }` with a task of 8 characters or more and a difficulty 1 to 5. */
    malformed: number;
    /** Tasks already kept, up to case, spacing and punctuation. */
    duplicate: number;
    /** Tasks outside the asked difficulty range. */
    offRange: number;
    /** Tasks the `accept` option turned down. */
    rejected: number;
  };
}

/** Options of {@link generateScenarios}. */
export interface GenerateScenariosOptions {
  /** The generator: any chat model (`new Model({ name, baseURL, apiKey })`, or the local model). */
  model: ChatModel;
  /** How many scenarios to return (1 to 1000). */
  count: number;
  /** What the tasks should be about, beyond what the tools allow (e.g. "questions a travel agent gets"). */
  instructions?: string;
  /** The difficulties to keep, `{ min, max }` within 1..5 (default 1 to 5): tasks outside are dropped. */
  difficulty?: {
    /** The lowest difficulty kept (default 1). */
    min?: number;
    /** The highest difficulty kept (default 5). */
    max?: number;
  };
  /** Scenarios asked for per call (default 8): small models keep a short list valid more often. */
  batchSize?: number;
  /** Generator calls before giving up (default: 3 per batch needed, at least 4). */
  maxCalls?: number;
  /** Sampling temperature (default 1: varied tasks). */
  temperature?: number;
  /** A seed for the generator's sampling (call i sends `seed + i`), where its API takes one. */
  seed?: number;
  /** The reply's token limit per call (default 2048). */
  maxTokens?: number;
  /**
   * Ask for the reply's JSON schema as `response_format` (default true). The art server enforces it
   * while sampling, so even the small local model writes valid JSON; OpenAI and vLLM take it too.
   * Turn it off for a generator whose API refuses `response_format`.
   */
  structuredOutput?: boolean;
  /**
   * A check of each valid, new task against what the tools can do (e.g. "names a town the server
   * knows"): tasks it returns false for are dropped, counted as `rejected`, and asked for again.
   */
  accept?: (scenario: Scenario) => boolean;
  /** Show a progress line (default true). */
  progress?: boolean;
  /** Called after each generator call. */
  onProgress?: (progress: ScenarioProgress) => void;
}

const GenerateScenariosOptionsSchema = z.object({
  model: z.custom<ChatModel>((m) => typeof (m as ChatModel | undefined)?.openai === "function", "must be a ChatModel (e.g. new Model({ ... }) or a TrainableModel)"),
  count: z.number().int().min(1).max(1000),
  instructions: z.string().max(20_000).optional(),
  difficulty: z.object({ min: z.number().int().min(1).max(5).optional(), max: z.number().int().min(1).max(5).optional() }).strict()
    .refine((d) => (d.min ?? 1) <= (d.max ?? 5), "min must not be above max").optional(),
  batchSize: z.number().int().min(1).max(50).optional(),
  maxCalls: z.number().int().min(1).max(10_000).optional(),
  temperature: z.number().min(0).max(2).optional(),
  seed: z.number().int().min(0).max(2 ** 31).optional(),
  maxTokens: z.number().int().min(64).optional(),
  structuredOutput: z.boolean().optional(),
  accept: functionOption<(scenario: Scenario) => boolean>().optional(),
  progress: z.boolean().optional(),
  onProgress: functionOption<(progress: ScenarioProgress) => void>().optional(),
}).strict();

/** One task as the generator must write it. */
const ScenarioSchema = z.object({
  task: z.string().trim().min(8, "a task of at least 8 characters").max(4000),
  difficulty: z.number().int().min(1).max(5),
}).strict();

/** The generator's reply: a list of tasks (each checked on its own, so one bad task does not sink the rest). */
const ReplySchema = z.object({ scenarios: z.array(z.unknown()).min(1) });

/** The generator could not write enough valid, distinct tasks within its calls. */
export class ScenarioGenerationError extends ArtError {
  constructor(
    message: string,
    /** The valid scenarios it did write. */
    readonly scenarios: Scenario[],
    /** The generator's replies, for a look at what went wrong. */
    readonly outputs: string[],
  ) {
    super(message);
  }
}

/**
 * Has `options.model` write `options.count` tasks an agent can do with `tools` (an {@link McpTools},
 * or the tools as an MCP server lists them), each with a difficulty from 1 to 5. Each call asks for a
 * batch as JSON and names the tasks kept so far, so the generator does not repeat them; a reply
 * without valid JSON, a malformed task, a duplicate (the same words, ignoring case, spacing and
 * punctuation) or a difficulty outside `difficulty` is dropped and more are asked for. Throws
 * {@link ScenarioGenerationError} when `maxCalls` calls leave fewer than `count`.
 */
export async function generateScenarios(tools: McpTools | McpToolInfo[], options: GenerateScenariosOptions): Promise<Scenario[]> {
  parseOptions("generateScenarios", GenerateScenariosOptionsSchema, options);
  const toolList = Array.isArray(tools) ? tools : tools.tools;
  if (!toolList.length) throw new ArtError("generateScenarios: the MCP server lists no tools: there is nothing to write tasks for");
  const min = options.difficulty?.min ?? 1;
  const max = options.difficulty?.max ?? 5;
  const batchSize = Math.min(options.batchSize ?? 8, options.count);
  const maxCalls = options.maxCalls ?? Math.max(4, 3 * Math.ceil(options.count / batchSize));
  const kept: Scenario[] = [];
  const seen = new Set<string>();
  const outputs: string[] = [];
  const progress: ScenarioProgress = { kept: 0, count: options.count, calls: 0, dropped: { unreadable: 0, malformed: 0, duplicate: 0, offRange: 0, rejected: 0 } };
  const line = options.progress === false ? null : new ProgressLine("scenarios");
  const show = () => line?.update({ done: kept.length, total: options.count, detail: droppedText(progress) });
  show();
  while (kept.length < options.count && progress.calls < maxCalls) {
    const ask = Math.min(batchSize, options.count - kept.length);
    const text = await callGenerator(options, generatorMessages(toolList, ask, min, max, options.instructions, kept), replyFormat(ask, min, max),
      options.seed === undefined ? undefined : options.seed + progress.calls);
    progress.calls++;
    outputs.push(text);
    const items = readReply(text);
    if (items === null) {
      progress.dropped.unreadable++;
    } else {
      for (const item of items) {
        const parsed = ScenarioSchema.safeParse(item);
        if (!parsed.success) { progress.dropped.malformed++; continue; }
        const scenario = parsed.data;
        if (scenario.difficulty < min || scenario.difficulty > max) { progress.dropped.offRange++; continue; }
        const key = normalizedTask(scenario.task);
        if (seen.has(key)) { progress.dropped.duplicate++; continue; }
        seen.add(key);
        if (options.accept && !options.accept(scenario)) { progress.dropped.rejected++; continue; }
        if (kept.length < options.count) kept.push(scenario);
      }
    }
    progress.kept = kept.length;
    options.onProgress?.({ ...progress, dropped: { ...progress.dropped } });
    show();
  }
  line?.finish({ done: kept.length, total: options.count, detail: droppedText(progress) });
  if (kept.length < options.count) {
    throw new ScenarioGenerationError(`generateScenarios: ${options.model.inferenceName()} wrote ${kept.length} valid, distinct ` +
      `scenarios of the ${options.count} asked for in ${progress.calls} calls (dropped: ${droppedText(progress) || "none"}); ` +
      "use a stronger generator, raise maxCalls, ask for fewer, or widen the difficulty range", kept, outputs);
  }
  return kept;
}

/** The generator's conversation for one batch (exported so a generator can be taught it). */
export function generatorMessages(tools: McpToolInfo[], count: number, min: number, max: number, instructions: string | undefined,
  written: Scenario[] = []): OpenAI.Chat.Completions.ChatCompletionMessageParam[] {
  const toolText = tools.map((t) => `- ${t.name}: ${t.description ?? "(no description)"}\n  arguments: ${JSON.stringify(t.inputSchema)}`).join("\n");
  const avoid = written.slice(-40).map((s) => `- ${s.task}`).join("\n");
  const levels = min === max ? `${min}` : `from ${min} to ${max}, spread across that range`;
  return [
    {
      role: "system",
      content: "You write realistic tasks for training an AI agent that can only act through the tools listed. " +
        "Each task is what a user would ask, in their own words, answerable by calling the tools, concrete " +
        "(names, places, numbers the tools can look up), and different from the others. Rate each task's difficulty: " +
        "1 needs one tool call, 3 a few calls, 5 several dependent calls and some reasoning over their results.",
    },
    {
      role: "user",
      content: `The agent's tools:\n${toolText}\n\n` +
        (instructions ? `What the tasks should be about: ${instructions}\n\n` : "") +
        (avoid ? `Tasks already written (write different ones):\n${avoid}\n\n` : "") +
        `Write ${count} new task${count === 1 ? "" : "s"} with difficulty ${levels}. Reply with JSON only, in this shape:\n` +
        `{"scenarios": [{"task": "...", "difficulty": 2}]}`,
    },
  ];
}

/** The reply's list of tasks, or null when it holds no JSON object of the expected shape. */
function readReply(text: string): unknown[] | null {
  const start = text.indexOf("{");
  const end = text.lastIndexOf("}");
  if (start < 0 || end <= start) return null;
  try {
    const parsed = ReplySchema.safeParse(JSON.parse(text.slice(start, end + 1)));
    return parsed.success ? parsed.data.scenarios : null;
  } catch {
    return null;
  }
}

/** A task's words, without case, spacing or punctuation: two tasks that differ only there are one. */
function normalizedTask(task: string): string {
  return task.toLowerCase().replace(/[^\p{L}\p{N}]+/gu, " ").trim();
}

function droppedText(progress: ScenarioProgress): string {
  const { unreadable, malformed, duplicate, offRange, rejected } = progress.dropped;
  return [
    unreadable ? `${unreadable} unreadable repl${unreadable === 1 ? "y" : "ies"}` : "",
    malformed ? `${malformed} malformed` : "",
    duplicate ? `${duplicate} duplicate${duplicate === 1 ? "" : "s"}` : "",
    offRange ? `${offRange} off the difficulty range` : "",
    rejected ? `${rejected} rejected` : "",
  ].filter(Boolean).join(", ");
}

/**
 * The reply's JSON schema: the shape the prompt shows, with the batch size and difficulty range. Not
 * `strict` (OpenAI's strict mode refuses length bounds); every task is validated here either way.
 */
function replyFormat(count: number, min: number, max: number): OpenAI.ResponseFormatJSONSchema {
  const difficulties = Array.from({ length: max - min + 1 }, (_, i) => min + i);
  const task = { type: "object", additionalProperties: false, required: ["task", "difficulty"],
    properties: { task: { type: "string", minLength: 8, maxLength: 300 }, difficulty: { enum: difficulties } } };
  return { type: "json_schema", json_schema: { name: "scenarios", schema: {
    type: "object", additionalProperties: false, required: ["scenarios"],
    properties: { scenarios: { type: "array", minItems: 1, maxItems: count, items: task } },
  } } };
}

async function callGenerator(options: GenerateScenariosOptions, messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[],
  format: OpenAI.ResponseFormatJSONSchema, seed: number | undefined): Promise<string> {
  try {
    const completion = await options.model.openai().chat.completions.create({
      model: options.model.inferenceName(), messages, temperature: options.temperature ?? 1, max_tokens: options.maxTokens ?? 2048,
      ...(options.structuredOutput === false ? {} : { response_format: format }),
      ...(seed === undefined ? {} : { seed }),
    });
    return completion.choices[0]?.message.content ?? "";
  } catch (error) {
    throw new ModelCallError(`generateScenarios: the generator ${options.model.inferenceName()} failed: ${(error as Error).message}`, { cause: error });
  }
}
