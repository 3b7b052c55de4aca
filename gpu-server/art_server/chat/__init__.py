"""Chat formatting: messages to prompt token ids, and tool calls parsed from model output."""
