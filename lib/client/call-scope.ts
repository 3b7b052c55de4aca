/**
 * Call scopes: code run inside `withCallScope(model, { step, signal }, fn)` sees the model's bare
 * name pinned to `step` (an evaluation of step s while a pipeline trains s + 1), and every model
 * request it sends is aborted by `signal` (a stopped pipeline leaves no request running). Kept in an
 * AsyncLocalStorage, like rollouts, so concurrent stages each see their own.
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";

/** What a scope sets for the model calls inside it. */
export interface CallScope {
  /** The step the bare model name stands for. */
  step?: number;
  /** Aborts every model request sent inside the scope. */
  signal?: AbortSignal;
}

const storage = new AsyncLocalStorage<ReadonlyMap<object, CallScope>>();

/** Runs `fn` with `scope` for `owner`'s calls (inner scopes add to outer ones). */
export function withCallScope<T>(owner: object, scope: CallScope, fn: () => T): T {
  const scopes = new Map(storage.getStore() ?? []);
  const outer = scopes.get(owner);
  scopes.set(owner, { ...outer, ...scope, signal: joinSignals(outer?.signal, scope.signal) });
  return storage.run(scopes, fn);
}

/** The scope `owner`'s calls are made in here, if any. */
export function currentCallScope(owner: object): CallScope | undefined {
  return storage.getStore()?.get(owner);
}

/** One signal that aborts when either does. */
export function joinSignals(a: AbortSignal | undefined | null, b: AbortSignal | undefined | null): AbortSignal | undefined {
  if (!a || !b) return a ?? b ?? undefined;
  return AbortSignal.any([a, b]);
}
