/**
 * The one place where names change between the TypeScript API (camelCase) and the wire
 * (snake_case, as the gpu-server and Python ART name things). Only names the server defines are
 * renamed: the metric names your trajectories carry cross both ways unchanged.
 * @module
 */
import type { GrpoConfig, LoraConfig, SftConfig } from "./config";
import { camelCase, snakeCase } from "./options";
import type { DeleteCheckpointsResult, HistoryRow, RegisteredModel, StepMetrics, TrainEvent } from "./results";
import type { SamplingParams } from "./sampling-params";
import type { DeleteCheckpointsWire, ModelInfo, SamplingWire, StreamLine } from "./wire";

/** The server's own metric and event field names (store/history.py, trainer/). */
const SERVER_NAMES = [
  "step", "split", "time", "trajectories", "groups", "reward", "reward_std", "groups_trained", "groups_skipped",
  "groups_skipped_by_reason", "trajectories_trained", "sequences", "sequences_split", "loss", "loss_first", "grad_norm",
  "clip_fraction", "approx_kl", "kl_ref", "entropy", "tokens_trained", "tokens", "conversations", "gradient_steps",
  "gradient_step", "epoch", "lr", "kind", "nothing_trained", "skip_details", "trained_into_step", "from_step",
  "tokenize_s", "forward_backward_s", "save_s", "reload_s", "sleep_s", "wake_s", "step_s", "sampling_s",
  "gpu_cost_per_hour_usd", "cost_usd", "judge_calls", "judge_prompt_tokens", "judge_completion_tokens", "judge_cost_usd",
  "sampler_logprob_diff_mean", "sampler_logprob_diff_max", "importance_ratio_mean", "importance_ratio_max",
  "sampler_weight_mean", "trainer_tokens_per_second", "trainer_tokens", "sampling_tokens_per_second", "policy_lag_min", "policy_lag_mean", "policy_lag_max", "groups_dropped_stale", "groups_retried_stale",
  "unsampled_trajectories_trained", "optimizer_reset", "truncated_stand_ins",
  // reasons in groups_skipped_by_reason
  "equal_rewards", "missing_tokens", "too_long", "too_small", "stale",
] as const;

/** `tokenize_s` -> `tokenizeSeconds`, `reward_std` -> `rewardStd`. */
function apiName(wireName: string): string {
  return camelCase(wireName.replace(/_s$/, "_seconds"));
}

const TO_API = new Map<string, string>(SERVER_NAMES.map((name) => [name, apiName(name)]));
const TO_WIRE = new Map<string, string>(SERVER_NAMES.map((name) => [apiName(name), name]));

/** A row of metrics from the server with the server's names in camelCase (nested reason counts too). */
export function metricsFromWire<T extends StepMetrics = StepMetrics>(row: Record<string, unknown>): T {
  return Object.fromEntries(Object.entries(row).map(([key, value]) => [
    TO_API.get(key) ?? key,
    key === "groups_skipped_by_reason" && value && typeof value === "object" ? metricsFromWire(value as Record<string, unknown>) : value,
  ])) as T;
}

/** The wire name of a metric the API names `name` (`rewardStd` -> `reward_std`; yours unchanged). */
export function metricNameToWire(name: string): string {
  return TO_WIRE.get(name) ?? name;
}

/** A history row from the server. */
export function historyRowFromWire(row: Record<string, unknown>): HistoryRow {
  return metricsFromWire<HistoryRow>(row);
}

/** A streamed training line from the server. */
export function trainEventFromWire(line: StreamLine): TrainEvent {
  if (line.type === "result") return { type: "result", step: line.step, metrics: historyRowFromWire(line.metrics) };
  return metricsFromWire(line as Record<string, unknown>) as TrainEvent;
}

/** A registered model from the server. */
export function registeredModelFromWire(info: ModelInfo): RegisteredModel {
  return {
    name: info.name, project: info.project, baseModel: info.base_model, step: info.step, inferenceName: info.inference_name,
    lora: { r: info.lora.r, alpha: info.lora.alpha, dropout: info.lora.dropout, targetModules: info.lora.target_modules },
    path: info.path, training: info.training, ...(info.resumed === undefined ? {} : { resumed: info.resumed }),
    ...(info.forked_from === undefined ? {} : { forkedFrom: info.forked_from }),
    reporters: (info.reporters ?? []).map((r) => ({
      tracker: r.tracker, state: r.state, rowsSent: r.rows_sent,
      ...(r.location === undefined ? {} : { location: r.location }), ...(r.error === undefined ? {} : { error: r.error }),
    })),
  };
}

/** What deleting checkpoints did, from the server. */
export function deleteCheckpointsFromWire(result: DeleteCheckpointsWire): DeleteCheckpointsResult {
  return {
    deleted: result.deleted, kept: result.kept, bestStep: result.best_step,
    ...(result.metric === undefined ? {} : { metric: result.metric }), ...(result.note === undefined ? {} : { note: result.note }),
  };
}

/** A sampled choice's recorded sampling parameters, from the server. */
export function samplingFromWire(s: SamplingWire): SamplingParams {
  return { temperature: s.temperature, topP: s.top_p, topK: s.top_k, minP: s.min_p ?? 0, constrained: s.constrained ?? false, engine: s.engine };
}

/** Sampling parameters as the server recorded them, to send back with the choice. */
export function samplingToWire(s: SamplingParams): SamplingWire {
  return { temperature: s.temperature, top_p: s.topP, top_k: s.topK, min_p: s.minP, constrained: s.constrained, engine: s.engine };
}

/** Keys to snake_case: the config objects' fields are all the server's names. */
function keysToWire(config: object): Record<string, unknown> {
  return Object.fromEntries(Object.entries(config).filter(([, v]) => v !== undefined).map(([k, v]) => [snakeCase(k), v]));
}

export function loraToWire(lora: LoraConfig): Record<string, unknown> {
  return keysToWire(lora);
}

export function trainConfigToWire(config: GrpoConfig): Record<string, unknown> {
  return keysToWire(config);
}

export function sftConfigToWire(config: SftConfig): Record<string, unknown> {
  const wire = keysToWire(config);
  if (config.trainOn) wire.train_on = snakeCase(config.trainOn);
  return wire;
}
