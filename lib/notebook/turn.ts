/**
 * One turn of a multi-turn rollout: the environment says something, the policy answers, and both
 * land in the trajectory. The policy is a model (asked with the system message and this turn's
 * message only, so prompts stay short while the trajectory keeps every turn; the server trains each
 * answer on the exact prompt it was sampled from) or a scripted player (a function).
 * @module
 */
import type { ChatModel } from "../client/chat-model";
import type { Conversation } from "../client/train-inputs";
import { ModelCallError } from "../core/errors";
import type { Trajectory } from "../core/trajectory";

/** A scripted player: gets nothing, returns its reply text (it closes over the game state). */
export type ScriptedReply = () => string;

/**
 * Pushes `userContent` as the next user message, gets the reply of `policy` and pushes it too
 * (a sampled choice with its token ids for a model, a plain assistant message for a script).
 * Returns the reply text. The server records the turn's `temperature` on it, and the trainer
 * scores the turn at that temperature (nothing to repeat in `train`).
 */
export async function takeTurn(trajectory: Trajectory, userContent: string, policy: ChatModel | ScriptedReply,
  options: { maxTokens: number; seed: number; temperature?: number }): Promise<string> {
  trajectory.push({ role: "user", content: userContent });
  if (typeof policy === "function") {
    const reply = policy();
    trajectory.push({ role: "assistant", content: reply });
    return reply;
  }
  const messages = trajectory.messages();
  const completion = await policy.openai().chat.completions.create({
    model: policy.inferenceName(), max_tokens: options.maxTokens, seed: options.seed, temperature: options.temperature,
    messages: [messages[0]!, messages[messages.length - 1]!],  // the rules, and this turn
  }).catch((error: unknown) => {
    throw new ModelCallError(`takeTurn: ${policy.inferenceName()} failed: ${(error as Error)?.message ?? String(error)}`, { cause: error });
  });
  trajectory.push(completion);
  return completion.choices[0]?.message.content ?? "";
}

/**
 * A multi-turn game played with {@link takeTurn}, as SFT demonstrations: one conversation per
 * answer, holding the system message, that turn's message and the answer, which is exactly what a
 * model is asked on that turn. A scripted player's games become what a model learns to imitate.
 */
export function turnDemonstrations(trajectory: Trajectory): Conversation[] {
  const messages = trajectory.messages();
  const system = messages[0]?.role === "system" ? [messages[0]] : [];
  const demonstrations: Conversation[] = [];
  for (let k = system.length; k + 1 < messages.length; k++) {
    const [user, answer] = [messages[k]!, messages[k + 1]!];
    if (user.role === "user" && answer.role === "assistant") demonstrations.push({ messages: [...system, user, answer] });
  }
  return demonstrations;
}
