/**
 * What reads a streamed answer for the recording fetch, whichever API it speaks (dialect.ts).
 * @module
 */
import type OpenAI from "openai";

type ChatCompletion = OpenAI.Chat.Completions.ChatCompletion;

/** Reads a streamed answer as it passes and says what chat completion it described. */
export interface StreamRecorder {
  /** Feeds the next piece of the stream's text. */
  push(text: string): void;
  /** The completion, once the stream ended; undefined when it carried an error or was cut short. */
  finish(): ChatCompletion | undefined;
  /** An error the stream carried, if any. */
  readonly error: string | undefined;
  /** The stream's last event (or an error) has been read: the answer is known. */
  readonly complete: boolean;
}
