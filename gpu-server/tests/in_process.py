"""The trainer in the test's own process, on a base model folder: what LoraHost needs to hold it."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM


class Holder:
    """A base model in fp32 on the CPU (LoraHost adds its slots to `.model`)."""

    def __init__(self, path):
        self.device = torch.device("cpu")
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
