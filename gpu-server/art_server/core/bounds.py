"""Bounds on what a request may carry, shared by the HTTP schemas and the trainer's configs."""

MAX_TOKEN_ID = 2**31 - 1  # checked again against the vocabulary when training
MAX_TOKENS_PER_SEQUENCE = 1 << 20
MAX_PRICE_PER_HOUR = 100_000  # US dollars an hour of the machine (gpu_cost_per_hour_usd)
MAX_REPORTED_TRAJECTORIES = 64  # trajectories per step a tracker is sent as a table (report_trajectories)
