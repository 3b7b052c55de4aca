"""Experiment tracking: each trainable model's history rows, as the server appends them to
history.jsonl, sent on to Weights & Biases or Trackio by a reporter thread per model and tracker.

history.jsonl stays the record: a reporter only reads it, keeps its own cursor, and one that fails
stops alone (one notice) without touching a step."""
