// Shared by the TypeScript tests: project paths and a headless Chromium launch.
import fs from "node:fs";
import path from "node:path";
import type { Browser, BrowserType } from "playwright-core";

export const ROOT = path.resolve(__dirname, "..", "..");
export const VENV_BIN = path.join(ROOT, ".venv", "bin");
export const ARTIFACTS = path.join(ROOT, ".artifacts");

/** Debian's chromium (or ART_CHROMIUM); setup installs it for `npm test`. */
export function chromiumPath(): string {
  const found = [process.env.ART_CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
    .find((p): p is string => !!p && fs.existsSync(p));
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
