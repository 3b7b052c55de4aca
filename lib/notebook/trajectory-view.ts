/**
 * A rollout as a chat transcript: `showTrajectory(t)` renders roles, tool calls and tool results,
 * the reward and metrics, and shades each sampled token by its logprob (pale: the model was sure,
 * red: an unlikely token), with the logprob on hover. `showTrajectoryGroup(g)` shows a group as a
 * reward table with every rollout folded below it. Outside a notebook both print plain text.
 * @module
 */
import { isSampledChoice, type MessageOrChoice, type SampledChoice, Trajectory, TrajectoryGroup } from "../core/trajectory";
import { displayBundle, escapeHtml, type MimeBundle, showsAs } from "../display/output";

/** Options of {@link showTrajectory}. */
export interface TrajectoryViewOptions {
  /** A heading above the transcript. */
  title?: string;
  /** Leave out the system message (default false). */
  hideSystem?: boolean;
}

const ROLE_COLORS: Record<string, string> = {
  system: "#6b7280", user: "#2563eb", assistant: "#059669", tool: "#9333ea", developer: "#6b7280",
};

function formatValue(value: unknown): string {
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(3);
  return String(value);
}

function contentText(content: unknown): string {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => (typeof part === "object" && part && "text" in part ? String(part.text) : JSON.stringify(part))).join("");
  return JSON.stringify(content);
}

interface ToolCallView {
  name: string;
  arguments: string;
  id?: string;
}

function toolCallsOf(item: MessageOrChoice): ToolCallView[] {
  const message = isSampledChoice(item) ? item.choice.message : item;
  const calls = (message as { tool_calls?: Array<{ id?: string; function?: { name: string; arguments: string } }> }).tool_calls ?? [];
  return calls.map((c) => ({ name: c.function?.name ?? "?", arguments: c.function?.arguments ?? "", id: c.id }));
}

/** The sampled tokens of a choice with their logprobs (the text as one piece when the server sent no token texts). */
export function sampledTokens(choice: SampledChoice): Array<{
  /** The token's text. */
  text: string;
  /** Its logprob when sampled. */
  logprob: number;
}> {
  const entries = choice.choice.logprobs?.content;
  if (entries?.length === choice.logprobs.length) return entries.map((e, i) => ({ text: e.token, logprob: choice.logprobs[i]! }));
  const mean = choice.logprobs.length ? choice.logprobs.reduce((a, b) => a + b, 0) / choice.logprobs.length : 0;
  return [{ text: choice.choice.message.content ?? "", logprob: mean }];
}

/** A token shaded by its probability: transparent at p = 1, red as p falls. */
function tokenHtml(text: string, logprob: number): string {
  const p = Math.exp(logprob);
  const alpha = Math.min(0.85, (1 - p) * 0.85);
  const shown = escapeHtml(text).replace(/\n/g, "↵\n");
  return `<span class="art-token" title="${escapeHtml(`${JSON.stringify(text)} logprob ${logprob.toFixed(3)} (p ${p.toFixed(2)})`)}" ` +
    `style="background:rgba(220,38,38,${alpha.toFixed(2)});border-radius:2px">${shown}</span>`;
}

function messageHtml(item: MessageOrChoice): string {
  const role = isSampledChoice(item) ? "assistant" : item.role;
  const color = ROLE_COLORS[role] ?? "#374151";
  let body: string;
  if (isSampledChoice(item)) {
    const tokens = sampledTokens(item);
    body = item.choice.message.tool_calls?.length && !item.choice.message.content ? "" : tokens.map((t) => tokenHtml(t.text, t.logprob)).join("");
  } else {
    body = escapeHtml(contentText(item.content));
  }
  const calls = toolCallsOf(item).map((c) => `<div style="margin-top:4px;font-family:var(--jp-code-font-family,monospace);font-size:12px">` +
    `→ <b>${escapeHtml(c.name)}</b>(${escapeHtml(c.arguments)})</div>`).join("");
  const toolId = !isSampledChoice(item) && item.role === "tool" ? ` <span style="opacity:.6">${escapeHtml(String(item.tool_call_id))}</span>` : "";
  const sampled = isSampledChoice(item)
    ? ` <span style="opacity:.6;font-weight:normal">sampled · ${item.tokenIds.length} tokens · mean logprob ${(item.logprobs.reduce((a, b) => a + b, 0) / Math.max(1, item.logprobs.length)).toFixed(3)}</span>`
    : "";
  return `<div class="art-message art-role-${escapeHtml(role)}" style="border-left:3px solid ${color};padding:2px 8px;margin:4px 0">` +
    `<div style="font-size:11px;font-weight:bold;color:${color};text-transform:uppercase">${escapeHtml(role)}${toolId}${sampled}</div>` +
    `<div style="white-space:pre-wrap;font-family:var(--jp-code-font-family,monospace);font-size:12px">${body}</div>${calls}</div>`;
}

function summaryLine(t: Trajectory): string {
  const metrics = Object.entries(t.metrics).map(([k, v]) => `${k} ${formatValue(v)}`).join(" · ");
  return `reward ${formatValue(t.reward)}${metrics ? ` · ${metrics}` : ""}`;
}

/** A trajectory as HTML: heading, reward and metrics, the transcript, and its logs. */
export function trajectoryHtml(t: Trajectory, options: TrajectoryViewOptions = {}): string {
  const items = t.messagesAndChoices.filter((item) => !(options.hideSystem && !isSampledChoice(item) && item.role === "system"));
  const logs = t.logs.length ? `<pre style="margin:6px 0 0;font-size:12px;opacity:.8">${escapeHtml(t.logs.join("\n"))}</pre>` : "";
  const tools = t.tools?.length ? `<div style="font-size:12px;opacity:.7">tools: ${t.tools.map((tool) => escapeHtml("function" in tool ? tool.function.name : "?")).join(", ")}</div>` : "";
  return `<div class="art-trajectory" style="font-family:var(--jp-ui-font-family,sans-serif);font-size:13px;max-width:60em">` +
    (options.title ? `<div style="font-weight:bold;margin-bottom:2px">${escapeHtml(options.title)}</div>` : "") +
    `<div class="art-trajectory-summary" style="margin-bottom:4px">${escapeHtml(summaryLine(t))}</div>${tools}` +
    items.map(messageHtml).join("") + logs + "</div>";
}

/** A trajectory as plain text: `[role] content` blocks, tool calls, reward, metrics and logs. */
export function trajectoryText(t: Trajectory, options: TrajectoryViewOptions = {}): string {
  const lines: string[] = [];
  if (options.title) lines.push(options.title);
  lines.push(summaryLine(t));
  for (const item of t.messagesAndChoices) {
    if (options.hideSystem && !isSampledChoice(item) && item.role === "system") continue;
    const role = isSampledChoice(item) ? "assistant (sampled)" : item.role;
    const text = isSampledChoice(item) ? item.choice.message.content ?? "" : contentText(item.content);
    lines.push(`[${role}] ${text}`);
    for (const call of toolCallsOf(item)) lines.push(`  -> ${call.name}(${call.arguments})`);
  }
  if (t.logs.length) lines.push(...t.logs);
  return lines.join("\n");
}

/** Shows a trajectory as a chat transcript (HTML in a notebook, text elsewhere). */
export function showTrajectory(t: Trajectory, options: TrajectoryViewOptions = {}): void {
  displayBundle(trajectoryBundle(t, options));
}

function trajectoryBundle(t: Trajectory, options: TrajectoryViewOptions = {}): MimeBundle {
  return { "text/html": trajectoryHtml(t, options), "text/plain": trajectoryText(t, options) };
}

/** Shows a group: one row per rollout (reward, metrics), each transcript folded below. */
export function showTrajectoryGroup(group: TrajectoryGroup, options: TrajectoryViewOptions & { max?: number } = {}): void {
  displayBundle(trajectoryGroupBundle(group, options));
}

function trajectoryGroupBundle(group: TrajectoryGroup, options: TrajectoryViewOptions & { max?: number } = {}): MimeBundle {
  const shown = group.trajectories.slice(0, options.max ?? 16);
  const mean = group.meanReward();
  const heading = `${options.title ? `${options.title}: ` : ""}${group.trajectories.length} rollouts, mean reward ${formatValue(mean)}` +
    (group.exceptions.length ? `, ${group.exceptions.length} threw` : "") + (group.hasZeroVariance() ? " (all rewards equal: no gradient)" : "");
  const html = `<div class="art-trajectory-group"><div style="font-weight:bold">${escapeHtml(heading)}</div>` +
    shown.map((t, i) => `<details style="margin:2px 0"><summary>#${i} · ${escapeHtml(summaryLine(t))}</summary>` +
      trajectoryHtml(t, { hideSystem: options.hideSystem }) + "</details>").join("") + "</div>";
  const text = [heading, ...shown.map((t, i) => `#${i} · ${summaryLine(t)}`)].join("\n");
  return { "text/html": html, "text/plain": text };
}

// A cell whose value is a trajectory or a group shows these views as its Out[n].
showsAs(Trajectory, (t) => trajectoryBundle(t));
showsAs(TrajectoryGroup, (group) => trajectoryGroupBundle(group));
