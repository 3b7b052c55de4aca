/**
 * Errors the client throws: a small hierarchy, each with a message that says what went wrong and
 * what to do about it. Server errors keep their HTTP status and OpenAI-style code.
 * @module
 */

/** The base class of every error this library throws. */
export class ArtError extends Error {
  /** `options.cause`: the underlying error, when another library's error led to this one. */
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The server answered with an error (an OpenAI-style body): `status` and `code` say which. */
export class ServerApiError extends ArtError {
  constructor(
    message: string,
    /** The HTTP status (4xx for a request to fix, 5xx for a step that failed on the server). */
    readonly status: number,
    /** The OpenAI-style error code, e.g. `invalid_value`, `model_not_found` or `context_length_exceeded`. */
    readonly code: string | null,
    /** The request field the error is about, when the server named one. */
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

/** Nothing answered at the backend's URL. */
export class ServerUnreachableError extends ArtError {}

/**
 * A training step that started did not complete (a non-finite loss, a cancelled request, a failed
 * save, ...): the server rolled it back, so the model is as it was before it; `code` says why.
 */
export class TrainingStepError extends ServerApiError {}

/** The server refused the token (401). */
export class UnauthorizedError extends ServerApiError {}

/** The model is not registered on this backend (call `model.register(backend)` first). */
export class ModelNotRegisteredError extends ArtError {}

/** A trajectory or group cannot be trained or logged as it is; the message names it. */
export class BadTrajectoryError extends ArtError {}

/** The local server process died; `logTail` holds the end of its log. */
export class ServerCrashedError extends ArtError {
  constructor(
    message: string,
    /** The last lines of the server's log. */
    readonly logTail: string,
  ) {
    super(message);
  }
}

/** The backend was closed (`backend.close()`); start a new one to go on. */
export class BackendClosedError extends ArtError {}

/** The environment or options name something that cannot work (e.g. a URL without its token). */
export class ConfigurationError extends ArtError {}

/** The server's answer was not what this client expects (a version mismatch, or a broken answer). */
export class ServerProtocolError extends ArtError {}

/** A call needs an optional package that is not installed; the message says which and how to add it. */
export class MissingDependencyError extends ArtError {}

/** A model call made by this library (a judge, a turn) failed; `cause` holds the client's error. */
export class ModelCallError extends ArtError {}

/** The Hugging Face Hub refused or failed a request; `cause` holds the Hub client's error. */
export class HubError extends ArtError {}

/** Work was stopped on purpose: a training loop interrupted (Kernel > Interrupt) or a request aborted by its signal. */
export class StoppedError extends ArtError {}
