// A JupyterLab notebook page as the Lab tests drive it: cells found by a marker in their source,
// edited and run as a user does (click, type, Shift+Enter, the menus), read from what the page draws.
import assert from "node:assert/strict";
import type { Page } from "playwright-core";

/** The code cell whose source contains `marker`. */
export function codeCell(page: Page, marker: string) {
  return page.locator(".jp-CodeCell", { has: page.locator(".jp-InputArea", { hasText: marker }) });
}

/** Waits until the notebook is drawn, on the project's kernel, and idle. */
export async function waitForKernelIdle(page: Page): Promise<void> {
  await page.locator(".jp-Notebook").first().waitFor({ timeout: 90_000 });
  await page.locator(".jp-Toolbar-kernelName", { hasText: "TypeScript (art-ts)" }).first().waitFor({ timeout: 90_000 });
  await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first().waitFor({ timeout: 90_000 });
}

/** The execution-count prompts of every code cell ("[7]:", "[*]:", "[ ]:"). */
export async function prompts(page: Page): Promise<string[]> {
  return page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").allTextContents();
}

/** The execution-count prompt of the code cell holding `marker`. */
export async function promptOf(page: Page, marker: string): Promise<string> {
  return (await codeCell(page, marker).locator(".jp-InputPrompt").first().textContent()) ?? "";
}

/** The text of the error boxes (Lab draws errors and stderr alike as application/vnd.jupyter.stderr) that name an error. */
export async function errorOutputs(page: Page): Promise<string[]> {
  const stderr = await page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').allTextContents();
  return stderr.filter((e) => /Error|KeyboardInterrupt/.test(e));
}

/** Replaces the source of the code cell holding `marker` as a user would: click, select all, type. */
export async function editCell(page: Page, marker: string, source: string): Promise<void> {
  const editor = codeCell(page, marker).locator(".cm-content").first();
  await editor.scrollIntoViewIfNeeded();
  await editor.click();
  await page.keyboard.press("Control+A");
  await page.keyboard.insertText(source);
}

/** Starts the code cell holding `marker` (Shift+Enter in its editor) without waiting for it. */
export async function startCell(page: Page, marker: string): Promise<void> {
  const editor = codeCell(page, marker).locator(".cm-content").first();
  await editor.scrollIntoViewIfNeeded();
  await editor.click();
  await page.keyboard.press("Shift+Enter");
}

/** Runs the code cell holding `marker` (Shift+Enter in its editor) and waits until it has run. */
export async function runCell(page: Page, marker: string, timeoutMs: number): Promise<void> {
  const before = await promptOf(page, marker);
  await startCell(page, marker);
  for (const deadline = Date.now() + timeoutMs; ;) {
    const now = await promptOf(page, marker);
    if (/\[\d+\]/.test(now) && now !== before) return;
    assert.ok(Date.now() < deadline, `the cell "${marker}" did not finish within ${timeoutMs / 1000} s (prompt ${now})`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Clicks a menu bar entry, then one of its items (e.g. "Kernel", "Interrupt Kernel"). */
export async function menu(page: Page, name: string, item: string | RegExp): Promise<void> {
  await page.locator(".lm-MenuBar-itemLabel", { hasText: new RegExp(`^${name}$`) }).click();
  await page.locator(".lm-Menu-itemLabel", { hasText: typeof item === "string" ? new RegExp(`^${item}$`) : item }).click();
}

/** Runs every cell (Run menu) and waits until each code cell has an execution count again. */
export async function runAll(page: Page, timeoutMs: number): Promise<void> {
  const before = await prompts(page);
  await menu(page, "Run", "Run All Cells");
  const codeCells = await page.locator(".jp-CodeCell").count();
  for (const deadline = Date.now() + timeoutMs; ;) {
    const texts = await prompts(page);
    if (texts.length === codeCells && texts.every((t, i) => /\[\d+\]/.test(t) && t !== before[i])) return;
    assert.ok(Date.now() < deadline, `cells still running after ${timeoutMs / 1000} s: ${texts.join(" ")}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}
