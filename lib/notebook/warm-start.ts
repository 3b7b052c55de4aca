/**
 * A warm start: SFT on demonstrations (a scripted player's or a teacher's) before RL, done once.
 * Re-running a notebook cell that calls it after the model has trained does nothing, so a user
 * who re-runs cells in another order never trains the demonstrations into an RL checkpoint twice.
 * @module
 */
import type { TrainableModel } from "../client/model";
import type { Conversation, TrainSftOptions } from "../client/train-inputs";
import type { TrainResult } from "../core/results";

/**
 * Trains `model` on `demonstrations` with SFT when it is still at step 0 and there is something to
 * learn; otherwise says why not and returns `undefined` (no demonstrations: RL alone; a model that
 * has trained already: re-run the server cell to start over).
 */
export async function warmStart(model: TrainableModel, demonstrations: readonly Conversation[], options: TrainSftOptions = {}):
  Promise<TrainResult | undefined> {
  if (!demonstrations.length) {
    console.log("warm start: no demonstrations, so RL starts from the base model");
    return undefined;
  }
  const step = await model.getStep();
  if (step > 0) {
    console.log(`warm start: ${model.name} is at step ${step}, it has trained already; skipped (start a fresh run to warm-start again)`);
    return undefined;
  }
  const result = await model.trainSft([...demonstrations], options);
  console.log(`warm start: ${demonstrations.length} demonstrations, loss ${Number(result.metrics.loss).toFixed(3)}, now at step ${result.step}`);
  return result;
}
