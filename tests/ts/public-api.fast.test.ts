// The package's public API is what lib/index.ts names, and this list: adding a name here is a promise
// to users, removing one is a breaking change (say it in the CHANGELOG). Types and values alike, read
// from index.ts with TypeScript's parser; the values are also checked at run time.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import ts from "typescript";
import * as art from "../../lib/index";
import { ROOT } from "./support/helpers";

const VALUES = [
  // models and backends
  "DEFAULT_BASE_MODEL", "LocalBackend", "Model", "RemoteBackend", "TrainableModel",
  // trajectories, rollouts, training
  "GatherError", "Trajectory", "TrajectoryGroup", "gatherTrajectories", "gatherTrajectoryGroups", "isSampledChoice", "retry",
  "trainLoop", "trainPipeline",
  // history, capture, integrations
  "bestStep", "historyFrame", "currentTrajectory", "recordingFetch",
  "DEFAULT_RUBRIC", "JudgeOutputError", "McpTools", "ScenarioGenerationError", "generateScenarios", "downloadFromHub", "pushToHub", "recordJudgeUsage", "rulerScoreGroup",
  // notebook helpers and display
  "ParameterError", "connectBackend", "evaluate", "extractTag", "historyFigure", "notebookParams", "parseTagged", "plotHistory",
  "randomChoice", "randomInt", "rng", "showComparison", "showTrajectory", "showTrajectoryGroup", "shuffled", "summarize",
  "takeTurn", "turnDemonstrations", "warmStart", "interval95", "reportResults", "trajectoryHtml", "trajectoryText",
  "DisplayHandle", "ProgressLine", "clearOutput", "displayBundle", "inNotebook", "notice", "showPlotly",
  "showTable", "showsAs", "withRichView",
  // errors
  "ArtError", "BackendClosedError", "BadTrajectoryError", "ConfigurationError", "HubError", "MissingDependencyError",
  "ModelCallError", "ModelNotRegisteredError", "ServerApiError", "ServerCrashedError", "ServerProtocolError",
  "ServerUnreachableError", "StoppedError", "TrainingStepError", "UnauthorizedError",
];

const TYPES = [
  "Backend", "ChatModel", "Conversation", "LocalBackendOptions", "ModelOptions", "RemoteBackendOptions", "SamplingThroughput",
  "StaleGroupCounts", "TrainOptions", "TrainSftOptions", "TrainableModelOptions", "GrpoConfig", "LoraConfig", "SftConfig", "TrainConfig",
  "DeleteCheckpointsResult", "ForkCheckpointOptions", "ForkOrigin", "HistoryRow", "RegisteredModel", "ReporterStatus", "StepMetrics", "TrainEvent", "TrainResult",
  "Tracker",
  "MessageOrChoice", "MessageParam", "SampledChoice", "SamplingParams", "ToolParam", "TrajectoryInit", "TrajectorySource",
  "GatherOptions", "GatherProgress", "RetryOptions", "PipelineEvalEvent", "PipelineOptions", "PipelineResult", "PipelineState",
  "PipelineStepEvent", "PipelineTrainEvent", "StageProgress", "TrainingProgress", "TrainLoopOptions", "TrainLoopResult",
  "BestStep", "HistoryFrame", "RecordingFetchOptions", "RecordedRequest", "JudgeScores", "JudgeUsage", "RulerOptions", "TokenPricing",
  "McpClientLike", "McpStdioOptions", "McpToolInfo", "McpToolResult", "GenerateScenariosOptions", "Scenario", "ScenarioProgress", "DownloadFromHubOptions", "PushToHubOptions",
  "PushToHubResult", "ParamValue", "ConnectOptions", "ConnectedBackend", "ScriptedReply", "EvalResult", "EvalSummary",
  "Interval95", "ReportOptions", "RunResults",
  "ChartMark", "HistoryInput", "PlotHistoryOptions", "TrajectoryViewOptions", "Random", "TagParse", "MimeBundle",
  "PlotlyFigure", "TableDigits", "TableInput", "ProgressMode", "ProgressState", "NoticeLevel",
];

/** Every name index.ts exports, from its source. */
function exportedNames(): string[] {
  const file = path.join(ROOT, "lib", "index.ts");
  const source = ts.createSourceFile(file, fs.readFileSync(file, "utf8"), ts.ScriptTarget.Latest);
  const names: string[] = [];
  for (const statement of source.statements) {
    if (!ts.isExportDeclaration(statement)) continue;
    assert.ok(statement.exportClause && ts.isNamedExports(statement.exportClause), "index.ts exports by name");
    for (const element of statement.exportClause.elements) names.push(element.name.text);
  }
  return names;
}

test("lib/index.ts exports exactly the listed names, each once", () => {
  const names = exportedNames();
  assert.equal(new Set(names).size, names.length, "a name exported twice");
  assert.deepEqual([...names].sort(), [...VALUES, ...TYPES].sort());
});

test("the door holds at most 80 runtime names (docs/client.md says when one goes through)", () => {
  assert.ok(VALUES.length <= 80, `${VALUES.length} runtime names`);
});

test("the listed values are there at run time, and nothing else is", () => {
  assert.deepEqual(Object.keys(art).sort(), [...VALUES].sort());
});

test("the internal helpers stay behind the door", () => {
  for (const name of ["camelCase", "snakeCase", "editDistance", "nearestName", "envName", "onPath", "repositoryRoot",
    "escapeHtml", "eventJson", "partsText", "SseAccumulator", "smooth", "joinSignals", "parseOptions", "checkTrainOptions",
    "generatorMessages", "JUPYTER_DISPLAY", "studentT95", "wilson95", "evalInterval", "smokeRun", "historyColumns"]) {
    assert.ok(!(name in art), `${name} is exported`);
  }
});
