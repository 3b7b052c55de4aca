/**
 * Rollout contexts: `await model.rollout(async (t) => ...)` runs agent code with a trajectory that
 * every chat completion sent through the model's {@link recordingFetch} lands in, in order,
 * whoever sends it (the `openai` client, the AI SDK, the Agents SDK, LangChain). The context lives
 * in an AsyncLocalStorage, so parallel rollouts each see only their own calls.
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";
import util from "node:util";
import type OpenAI from "openai";
import { assistantMessageOf, isSampledChoice, sampledChoice, Trajectory, type MessageOrChoice, type MessageParam, type ToolParam, type TrajectoryInit } from "../core/trajectory";

type ChatCompletion = OpenAI.Chat.Completions.ChatCompletion;

interface RolloutScope {
  readonly trajectory: Trajectory;
  /** Calls sent in this rollout that have not finished (or were not read to their end). */
  pending: number;
  /** The rollout function has returned: its trajectory may sit in a group already. */
  closed: boolean;
}

/** The innermost rollout of each model the calling code runs in: a rollout of another model nested
 * inside keeps the outer one's calls going to the outer trajectory. */
const storage = new AsyncLocalStorage<ReadonlyMap<object, RolloutScope>>();
/** `NODE_DEBUG=art` shows what is and is not recorded. */
export const debugLog = util.debuglog("art");
/** Where the conversation the next call continues starts, per trajectory (see {@link recordCall}). */
const segmentStarts = new WeakMap<Trajectory, number>();

const AWAIT_ADVICE = "Await every call inside the rollout.";

/**
 * Runs `fn` with a new trajectory as `owner`'s current rollout; resolves with the trajectory once
 * `fn` has. A call still running then is not recorded (the trajectory may be in a group by the time
 * it ends): `t.logs` says how many there were.
 */
export async function runRollout(owner: object, fn: (trajectory: Trajectory) => unknown, init?: TrajectoryInit): Promise<Trajectory> {
  const trajectory = new Trajectory(init);
  const scope: RolloutScope = { trajectory, pending: 0, closed: false };
  const scopes = new Map(storage.getStore() ?? []);
  scopes.set(owner, scope);
  try {
    await storage.run(scopes, async () => fn(trajectory));
  } finally {
    scope.closed = true;
  }
  if (scope.pending) {
    trajectory.log(`${scope.pending} model call(s) still running (or not read to their end) when the rollout function ` +
      `returned: not recorded. ${AWAIT_ADVICE}`);
  }
  return trajectory;
}

/** The trajectory of `owner`'s rollout that the calling code runs in, if any. */
export function currentTrajectory(owner: object): Trajectory | undefined {
  return storage.getStore()?.get(owner)?.trajectory;
}

/** A call sent in a rollout: recorded when it completes, unless its rollout has returned by then. */
export interface PendingCall {
  /** Records the completed call; false when the rollout had returned already (nothing recorded). */
  record(request: RecordedRequest, completion: ChatCompletion, withTokens: boolean): boolean;
  /** The call ended without anything to record (an error, a refused request). */
  abandon(): void;
}

/** Starts a call of `owner`'s current rollout; undefined outside any rollout of `owner`. */
export function startCall(owner: object): PendingCall | undefined {
  const scope = storage.getStore()?.get(owner);
  if (!scope) return undefined;
  if (scope.closed) scope.trajectory.log(`a model call made after the rollout function returned: not recorded. ${AWAIT_ADVICE}`);
  else scope.pending += 1;
  let open = !scope.closed;
  const end = () => {
    if (open) scope.pending -= 1;
    open = false;
  };
  return {
    record(request, completion, withTokens) {
      const late = scope.closed;
      end();
      if (late) return false;
      recordCall(scope.trajectory, request, completion, withTokens);
      return true;
    },
    abandon: end,
  };
}

/** What one recorded call sent: the conversation so far and the tools offered. */
export interface RecordedRequest {
  /** The conversation the call sends, as chat messages. */
  messages: MessageParam[];
  /** The tools it offers, as chat tool definitions. */
  tools?: ToolParam[];
}

/**
 * Appends one call to `trajectory`: the request's messages that the trajectory does not hold yet
 * (the tool results and user turns since the last call), then the sampled choice. When the
 * request does not continue the trajectory's conversation (a sub-agent, a summariser, a framework
 * that rewrites history) its messages start a new segment after the previous ones: training takes
 * each sampled turn with its own prompt ids, so both train correctly. `withTokens` is false for an
 * endpoint that returns no token ids (a baseline): its turns are kept as plain assistant messages.
 */
export function recordCall(trajectory: Trajectory, request: RecordedRequest, completion: ChatCompletion, withTokens: boolean): void {
  const start = Math.min(segmentStarts.get(trajectory) ?? 0, trajectory.messagesAndChoices.length);
  const held = trajectory.messagesAndChoices.slice(start).map(messageKey);
  const continues = held.length <= request.messages.length && held.every((key, i) => key === messageKey(request.messages[i]!));
  if (!continues) segmentStarts.set(trajectory, trajectory.messagesAndChoices.length);
  trajectory.messagesAndChoices.push(...request.messages.slice(continues ? held.length : 0));
  mergeTools(trajectory, request.tools);
  if (completion.choices.length > 1) trajectory.log(`recorded choice 0 of ${completion.choices.length} (n > 1): rollouts record one choice per call`);
  const choice = completion.choices[0];
  if (!choice) return;
  if (!withTokens) {
    trajectory.messagesAndChoices.push(assistantMessageOf(choice.message));
    return;
  }
  try {
    trajectory.messagesAndChoices.push(sampledChoice(completion, 0));
  } catch (error) {
    trajectory.log(`a recorded call has no token ids, kept as a plain message: ${(error as Error).message}`);
    trajectory.messagesAndChoices.push(assistantMessageOf(choice.message));
  }
}

function mergeTools(trajectory: Trajectory, tools: ToolParam[] | undefined): void {
  if (!tools?.length) return;
  const have = new Set((trajectory.tools ?? []).map(toolName));
  const added = tools.filter((tool) => !have.has(toolName(tool)));
  if (added.length) trajectory.tools = [...(trajectory.tools ?? []), ...added];
}

function toolName(tool: ToolParam): string {
  return (tool as { function?: { name?: string } }).function?.name ?? JSON.stringify(tool);
}

/**
 * A message's identity for "does this request continue the trajectory": role, text and tool calls
 * (arguments compared as parsed JSON). Frameworks send back an assistant turn with `content: ""`
 * where the server said null, re-serialise arguments, or split text into parts; none of that makes
 * it another message.
 */
function messageKey(item: MessageOrChoice): string {
  const m = (isSampledChoice(item) ? assistantMessageOf(item.choice.message) : item) as {
    role: string; content?: unknown; tool_calls?: { function?: { name?: string; arguments?: string } }[];
  };
  const calls = (m.tool_calls ?? []).map((call) => [call.function?.name ?? "", canonicalJson(call.function?.arguments ?? "")]);
  return JSON.stringify([m.role, textOf(m.content).trim(), calls]);
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part: { type?: string; text?: string }) => (part?.type === "text" ? part.text ?? "" : JSON.stringify(part))).join("");
}

function canonicalJson(text: string): string {
  try {
    return JSON.stringify(sortKeys(JSON.parse(text)));
  } catch {
    return text;
  }
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]));
  }
  return value;
}
