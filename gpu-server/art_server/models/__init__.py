"""Base models: the built-in offline models and Hugging Face ids or local paths."""
