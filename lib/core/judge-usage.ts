/**
 * What judging a group cost: the judge calls made for it, their tokens, and their price where the
 * judge has one. A group carries it from the judge (rulerScoreGroup, or `recordJudgeUsage` after any
 * judge call of your own) to the step or log that sends it, whose history row records it.
 * @module
 */

/** A judge's price per million tokens, in US dollars (the provider's list price). */
export interface TokenPricing {
  /** Per million prompt (input) tokens. */
  inputPerMillionUsd: number;
  /** Per million completion (output) tokens. */
  outputPerMillionUsd: number;
}

/** The judge calls made for a group, summed. */
export interface JudgeUsage {
  /** Judge calls (a retry is a call). */
  calls: number;
  /** Their prompt tokens, as the judge's endpoint reported them. */
  promptTokens: number;
  /** Their completion tokens. */
  completionTokens: number;
  /** Their cost at the judge's price, or undefined when a call was made by a judge without one. */
  costUsd: number | undefined;
}

/** The cost of one call's tokens at `pricing` (undefined without a price). */
export function tokenCost(pricing: TokenPricing | undefined, promptTokens: number, completionTokens: number): number | undefined {
  if (!pricing) return undefined;
  return (promptTokens * pricing.inputPerMillionUsd + completionTokens * pricing.outputPerMillionUsd) / 1e6;
}

/** `a` and `b` together; a cost is known only when both are. */
export function addJudgeUsage(a: JudgeUsage | undefined, b: JudgeUsage): JudgeUsage {
  if (!a) return { ...b };
  return {
    calls: a.calls + b.calls, promptTokens: a.promptTokens + b.promptTokens, completionTokens: a.completionTokens + b.completionTokens,
    costUsd: a.costUsd === undefined || b.costUsd === undefined ? undefined : a.costUsd + b.costUsd,
  };
}

/** The judge usage of `groups` as a step or log request sends it (nothing when no judge was called). */
export function judgeUsageToWire(groups: Iterable<{ judgeUsage?: JudgeUsage }>): {
  judge_calls?: number; judge_prompt_tokens?: number; judge_completion_tokens?: number; judge_cost_usd?: number;
} {
  let total: JudgeUsage | undefined;
  for (const group of groups) if (group.judgeUsage) total = addJudgeUsage(total, group.judgeUsage);
  if (!total) return {};
  return {
    judge_calls: total.calls, judge_prompt_tokens: total.promptTokens, judge_completion_tokens: total.completionTokens,
    ...(total.costUsd === undefined ? {} : { judge_cost_usd: total.costUsd }),
  };
}
