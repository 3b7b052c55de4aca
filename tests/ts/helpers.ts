// Shared by the TypeScript tests: project paths and a headless Chromium launch, taken from the
// scripts' own module (scripts/project.mjs) so tests and set-up agree on both.
import type { Browser, BrowserType } from "playwright-core";

interface ProjectModule {
  ROOT: string;
  VENV_BIN: string;
  ARTIFACTS: string;
  findChromium(): string | null;
}
// Node >= 20.19 can require() an ES module without top-level await.
const project = require("../../scripts/project.mjs") as ProjectModule;

export const { ROOT, VENV_BIN, ARTIFACTS } = project;

/** Debian's chromium (or ART_CHROMIUM); setup installs it for `npm test`. */
export function chromiumPath(): string {
  const found = project.findChromium();
  if (!found) throw new Error("chromium not found: run `node scripts/setup.mjs --browser` or set ART_CHROMIUM");
  return found;
}

/** Headless Chromium with the flags this offline machine needs (playwright gives it a fresh profile). */
export async function launchChromium(type: BrowserType): Promise<Browser> {
  return type.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
}
