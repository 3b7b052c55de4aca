"""Training: GRPO and SFT on LoRA adapters, one checkpoint per step."""
