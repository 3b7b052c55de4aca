/**
 * art-ts: the public door of the TypeScript client. Notebook cells import from here:
 * `import { TrainableModel, LocalBackend, showPlotly } from "./lib/index";`
 * (the kernel runs in the project root; tslab resolves a file, not a folder, so name `index`).
 * @module
 */
export * from "./display";
export * from "./notice";
export * from "./errors";
export * from "./backend";
export * from "./local-backend";
export * from "./base-model";
export * from "./model";
export * from "./trajectory";
export * from "./trajectory-view";
export * from "./gather";
export * from "./history";
export * from "./ruler";
export * from "./hub";
export * from "./config";
export * from "./results";
export * from "./options";
export * from "./server-command";
export * from "./random";
export * from "./params";
export * from "./tags";
export * from "./evaluate";
export * from "./loop";
export * from "./connect";
export * from "./turn";
export { currentTrajectory } from "./rollout";
export * from "./recording-fetch";
export * from "./sse-accumulator";
export * from "./mcp-tools";
