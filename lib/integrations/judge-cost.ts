/**
 * Pricing judge calls: a judge's reply reports its token usage, and a {@link Model} configured with
 * `pricing` turns it into dollars. `recordJudgeUsage` adds one call to the group it judged, so the
 * step (or the logged evaluation) that sends the group records the judge's calls, tokens and cost.
 * @module
 */
import type OpenAI from "openai";
import type { ChatModel } from "../client/chat-model";
import { addJudgeUsage, tokenCost } from "../core/judge-usage";
import type { TrajectoryGroup } from "../core/trajectory";

/**
 * Adds one judge call's `usage` (the completion's `usage` field) to `group.judgeUsage`, priced at
 * the judge's `pricing` when it has one. Call it after each call of a judge of your own;
 * {@link rulerScoreGroup} calls it for every call it makes. A reply without usage counts the call
 * with 0 tokens and leaves the cost unknown.
 */
export function recordJudgeUsage(group: TrajectoryGroup, judge: ChatModel, usage: OpenAI.CompletionUsage | undefined): void {
  const promptTokens = usage?.prompt_tokens ?? 0;
  const completionTokens = usage?.completion_tokens ?? 0;
  const costUsd = usage ? tokenCost(judge.pricing, promptTokens, completionTokens) : undefined;
  group.judgeUsage = addJudgeUsage(group.judgeUsage, { calls: 1, promptTokens, completionTokens, costUsd });
}
