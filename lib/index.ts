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
 * What this file exports, by name, is the package's public API: each name is a promise to users
 * (`tests/ts/public-api.fast.test.ts` lists them, so adding or removing one is a decision, not a
 * side effect of a new file). Everything else in lib/ is internal and may change in any release.
 *
 * Guides: `docs/client.md` (the client), `docs/training.md` (options and metrics).
 * @module
 */
// Models and backends: where a model is served and trained, and the model you call and train.
export { type Backend, type ForkCheckpointOptions, RemoteBackend, type RemoteBackendOptions } from "./client/backend";
export { LocalBackend, type LocalBackendOptions } from "./client/local-backend";
export { DEFAULT_BASE_MODEL } from "./client/base-model";
export { type ChatModel, Model, type ModelOptions } from "./client/chat-model";
export { TrainableModel, type TrainableModelOptions } from "./client/model";
export { type Conversation, type SamplingThroughput, type StaleGroupCounts, type TrainOptions, type TrainSftOptions } from "./client/train-inputs";
export type { GrpoConfig, LoraConfig, SftConfig, TrainConfig } from "./core/config";
export type { DeleteCheckpointsResult, ForkOrigin, HistoryRow, RegisteredModel, ReporterStatus, StepMetrics, TrainEvent, TrainResult, Tracker } from "./core/results";

// Trajectories: what a rollout records, and the groups GRPO compares.
export {
  isSampledChoice, type MessageOrChoice, type MessageParam, type SampledChoice, type ToolParam, Trajectory,
  TrajectoryGroup, type TrajectoryInit, type TrajectorySource,
} from "./core/trajectory";
export type { SamplingParams } from "./core/sampling-params";

// Running rollouts in parallel, and training: one step, the pipeline, the notebook's loop.
export {
  GatherError, type GatherOptions, type GatherProgress, gatherTrajectories, gatherTrajectoryGroups, retry, type RetryOptions,
} from "./client/gather";
export { trainPipeline } from "./client/pipeline";
export {
  type PipelineEvalEvent, type PipelineOptions, type PipelineResult, type PipelineState, type PipelineStepEvent,
  type PipelineTrainEvent, type StageProgress, type TrainingProgress,
} from "./client/pipeline-options";
export { trainLoop, type TrainLoopOptions, type TrainLoopResult } from "./notebook/loop";

// History: a model's metrics, as rows and as a danfo DataFrame.
export { type HistoryFrame, historyFrame } from "./client/history-frame";
export { type BestStep, bestStep } from "./client/best-step";

// Capture: a rollout's calls through any OpenAI-compatible client, recorded into its trajectory.
export { recordingFetch, type RecordingFetchOptions } from "./capture/recording-fetch";
export { currentTrajectory, type RecordedRequest } from "./capture/rollout-context";

// Integrations: RULER (a judge model scores a group), MCP tools, the Hugging Face Hub.
export { DEFAULT_RUBRIC, JudgeOutputError, type JudgeScores, type RulerOptions, rulerScoreGroup } from "./integrations/ruler";
export { recordJudgeUsage } from "./integrations/judge-cost";
export type { JudgeUsage, TokenPricing } from "./core/judge-usage";
export { type McpClientLike, type McpStdioOptions, type McpToolInfo, type McpToolResult, McpTools } from "./integrations/mcp-tools";
export { type GenerateScenariosOptions, generateScenarios, type Scenario, ScenarioGenerationError, type ScenarioProgress } from "./integrations/scenarios";
export {
  downloadFromHub, type DownloadFromHubOptions, pushToHub, type PushToHubOptions, type PushToHubResult,
} from "./integrations/hub";

// The notebook helpers: parameters, connecting, a turn, evaluation, charts and views, randomness, tags.
export { notebookParams, ParameterError, type ParamValue } from "./notebook/params";
export { type ConnectedBackend, connectBackend, type ConnectOptions } from "./notebook/connect";
export { type ScriptedReply, takeTurn, turnDemonstrations } from "./notebook/turn";
export { warmStart } from "./notebook/warm-start";
export { type EvalResult, type EvalSummary, evaluate, showComparison, summarize } from "./notebook/evaluate";
export { type Interval95, interval95 } from "./notebook/interval";
export { reportResults, type ReportOptions, type RunResults } from "./notebook/run-results";
export { type ChartMark, historyFigure, type HistoryInput, plotHistory, type PlotHistoryOptions } from "./notebook/history-plot";
export {
  showTrajectory, showTrajectoryGroup, trajectoryHtml, trajectoryText, type TrajectoryViewOptions,
} from "./notebook/trajectory-view";
export { type Random, randomChoice, randomInt, rng, shuffled } from "./notebook/random";
export { extractTag, parseTagged, type TagParse } from "./notebook/tags";

// Showing things in a notebook (with terminal fallbacks).
export {
  clearOutput, displayBundle, DisplayHandle, inNotebook, type MimeBundle, showsAs, withRichView,
} from "./display/output";
export { type PlotlyFigure, showPlotly } from "./display/plotly";
export { showTable, type TableDigits, type TableInput } from "./display/table";
export { ProgressLine, type ProgressMode, type ProgressState } from "./display/progress-line";
export { notice, type NoticeLevel } from "./display/notice";

// Errors: every error the client throws is an ArtError; catch the kind you can act on.
export {
  ArtError, BackendClosedError, BadTrajectoryError, ConfigurationError, HubError, MissingDependencyError, ModelCallError,
  ModelNotRegisteredError, ServerApiError, ServerCrashedError, ServerProtocolError, ServerUnreachableError, StoppedError,
  TrainingStepError, UnauthorizedError,
} from "./core/errors";
