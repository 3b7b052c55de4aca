/**
 * Server-sent events, split as they arrive: the text of a stream, in any pieces, in; each event's
 * `data` (its `data:` lines joined by newlines, the SSE rule) out. The stream readers of the three
 * APIs (chat completions, Responses, Messages) are built on it.
 * @module
 */

/** Splits SSE text into events and hands each event's data to `onData`. */
export class SseEvents {
  private buffer = "";

  constructor(private readonly onData: (data: string) => void) {}

  /** Feeds the next piece of the stream's text. */
  push(text: string): void {
    this.buffer += text;
    // Events end with a blank line; keep an unfinished one for the next piece.
    let end: number;
    while ((end = this.nextEventEnd()) >= 0) {
      const event = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end).replace(/^(\r?\n){2}/, "");
      this.onEvent(event);
    }
  }

  /** The stream ended: an event left without its blank line still counts. */
  end(): void {
    if (this.buffer.trim()) this.onEvent(this.buffer);
    this.buffer = "";
  }

  private nextEventEnd(): number {
    const lf = this.buffer.indexOf("\n\n");
    const crlf = this.buffer.indexOf("\r\n\r\n");
    if (lf < 0) return crlf;
    if (crlf < 0) return lf;
    return Math.min(lf, crlf);
  }

  private onEvent(event: string): void {
    const data = event.split(/\r?\n/).filter((line) => line.startsWith("data:")).map((line) => line.slice(5).replace(/^ /, "")).join("\n");
    if (data) this.onData(data);
  }
}

/** Parses one event's data as a JSON object; a string saying what is wrong when it is not one. */
export function eventJson(data: string): Record<string, unknown> | string {
  try {
    const value: unknown = JSON.parse(data);
    if (value && typeof value === "object" && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // said below
  }
  return `a stream event is not a JSON object: ${data.slice(0, 200)}`;
}
