/**
 * art-ts: the public door of the TypeScript client, and the only module a user imports:
 * `import { TrainableModel, LocalBackend } from "art-ts"` in your project, and in a notebook cell
 * `from "./lib/index"` (the project's kernel runs in the project root; tslab resolves a file, not
 * a folder, so name `index`).
 *
 * The source folders are layers; a file imports only from its own folder or a layer below it
 * (`tests/ts/layers.fast.test.ts` keeps it so). Top to bottom:
 *
 * - `lib/notebook/`: what a notebook cell calls: parameters, connecting, the training loop, charts
 * - `lib/integrations/`: the Hugging Face Hub, the RULER judge, MCP tools
 * - `lib/client/`: models and backends: the server's process and HTTP API, training, rollouts in parallel
 * - `lib/capture/`: recording a rollout's model calls (with their token ids) into its trajectory
 * - `lib/display/`: showing things in a notebook, with terminal fallbacks
 * - `lib/core/`: what every layer shares: errors, option checks, trajectories, the wire's schemas
 *
 * Guides: `docs/client.md` (the client), `docs/training.md` (options and metrics).
 * @module
 */
export * from "./core/errors";
export * from "./core/options";
export * from "./core/trajectory";
export * from "./core/config";
export * from "./core/results";

export * from "./display/output";
export * from "./display/plotly";
export * from "./display/table";
export * from "./display/progress-line";
export * from "./display/notice";

export { currentTrajectory, type RecordedRequest } from "./capture/rollout-context";
export * from "./capture/recording-fetch";
export * from "./capture/sse-accumulator";
export * from "./capture/sse-events";
export * from "./capture/dialect";
export * from "./capture/responses-dialect";
export * from "./capture/messages-dialect";

export * from "./client/backend";
export * from "./client/local-backend";
export * from "./client/server-command";
export * from "./client/base-model";
export * from "./client/model";
export * from "./client/gather";
export * from "./client/pipeline";
export * from "./client/call-scope";
export * from "./client/history-frame";

export * from "./integrations/hub";
export * from "./integrations/ruler";
export * from "./integrations/mcp-tools";

export * from "./notebook/params";
export * from "./notebook/connect";
export * from "./notebook/loop";
export * from "./notebook/turn";
export * from "./notebook/evaluate";
export * from "./notebook/history-plot";
export * from "./notebook/trajectory-view";
export * from "./notebook/random";
export * from "./notebook/tags";
