/**
 * art-ts: the public door of the TypeScript client. Notebook cells import from here:
 * `import { showPlotly, ProgressLine } from "./lib/index";`
 * (the kernel runs in the project root; tslab resolves a file, not a folder, so name `index`)
 * @module
 */
export * from "./display";
