// Every relative link of the README and docs/ (the generated API reference included) points at a
// file that exists, and a `#fragment` at a heading of that page (GitHub's heading ids).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { it } from "node:test";
import { ROOT } from "../support/helpers";

function markdownFiles(dir: string): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".md")).map((f) => path.join(dir, f));
}

/** GitHub's id for a heading: lower case, punctuation dropped, spaces as hyphens. */
function slug(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
}

function headingIds(file: string): Set<string> {
  const text = fs.readFileSync(path.join(ROOT, file), "utf8").replace(/^```[\s\S]*?^```$/gm, "");
  return new Set([...text.matchAll(/^#{1,6}\s+(.+)$/gm)].map((m) => slug(m[1]!)));
}

it("relative links in the README and docs/ resolve, fragments included", () => {
  const files = ["README.md", "notebooks/README.md", "gpu-server/README.md", ...markdownFiles("docs")];
  const broken: string[] = [];
  for (const file of files) {
    const text = fs.readFileSync(path.join(ROOT, file), "utf8").replace(/^```[\s\S]*?^```$/gm, "");
    for (const match of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = match[1]!;
      if (/^[a-z]+:/.test(target)) continue;
      const [linkPath, fragment] = target.split("#") as [string, string | undefined];
      const resolved = linkPath ? path.normalize(path.join(path.dirname(file), linkPath)) : file;
      if (!fs.existsSync(path.join(ROOT, resolved))) broken.push(`${file}: ${target} (no ${resolved})`);
      else if (fragment && resolved.endsWith(".md") && !headingIds(resolved).has(fragment)) broken.push(`${file}: ${target} (no heading #${fragment})`);
    }
  }
  assert.deepEqual(broken, []);
});
