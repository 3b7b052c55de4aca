"""Inference engines: one interface (base.py), two implementations (hf.py, vllm.py)."""
