"""A GRPO step's configuration: declared once, here; the HTTP schema (TrainRequest.config) and the
trainer both use it, and docs/openapi.json shows it (docs/training.md says what each option does)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..core.bounds import MAX_TOKENS_PER_SEQUENCE
from ..core.json_types import INTEGRAL, WholeNumber
from .micro_batches import MICRO_BATCH_TOKENS


class GRPOConfig(BaseModel):
    """A GRPO step's configuration: declared once, here; the HTTP schema (TrainRequest.config) and
    the trainer both use it, and docs/openapi.json shows it."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={  # kl_ref_step needs kl_coef above 0 (the rule of _check_kl below)
            "if": {"required": ["kl_ref_step"], "properties": {"kl_ref_step": {"type": "integer"}}},
            "then": {"required": ["kl_coef"], "properties": {"kl_coef": {"exclusiveMinimum": 0}}},
        },
    )
    learning_rate: float = Field(default=5e-6, gt=0, le=1, allow_inf_nan=False)
    loss: Literal["ppo", "cispo"] = "ppo"
    # None: the defaults of the ratio in use (0.2 / 0.28 per token, GSPO's 3e-4 / 4e-4 per sequence).
    eps_low: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    eps_high: float | None = Field(default=None, ge=0, le=10, allow_inf_nan=False)
    kl_coef: float = Field(default=0.0, ge=0, le=100, allow_inf_nan=False)
    # None: divide advantages by the group's reward std, except under length_normalization
    # "constant" (Dr. GRPO removes that division); true or false says so for any mode.
    scale_rewards: bool | None = None
    importance_sampling: Literal["token", "sequence"] = "token"
    max_grad_norm: float = Field(default=1.0, gt=0, le=1e6, allow_inf_nan=False)
    micro_batch_size: WholeNumber = Field(default=16, ge=1, le=4096)
    # Padded tokens per forward/backward pass (micro_batches.py): bounds a pass's activation memory.
    micro_batch_tokens: WholeNumber = Field(default=MICRO_BATCH_TOKENS, ge=1, le=10**8)
    gradient_steps: WholeNumber = Field(default=1, ge=1, le=1000)
    # Overrides the temperature each turn is scored at (by default the one it was sampled with).
    temperature: float | None = Field(default=None, gt=0, le=10, allow_inf_nan=False)
    max_sequence_length: Annotated[int, Field(ge=1, le=MAX_TOKENS_PER_SEQUENCE), INTEGRAL] | None = None
    sampler_correction: Literal["tis", "none"] = "tis"
    sampler_correction_cap: float = Field(default=2.0, ge=1, le=1e6, allow_inf_nan=False)
    length_normalization: Literal["trajectory", "token", "constant"] = "trajectory"
    # The constant of length_normalization "constant" (Dr. GRPO's maximum completion length).
    normalization_tokens: WholeNumber = Field(default=1024, ge=1, le=MAX_TOKENS_PER_SEQUENCE)
    # The KL penalty's reference: this step's adapter (None: the base model).
    kl_ref_step: Annotated[int, Field(ge=0, le=10**9), INTEGRAL] | None = None
    # Groups with a turn sampled further behind are skipped ("stale").
    max_steps_off_policy: Annotated[int, Field(ge=0, le=10**6), INTEGRAL] | None = None
    # Trajectories whose assistant turns are plain messages (offline logs, another model's answers):
    # trained, their tokens scored by the policy at the start of the step (ART's option of this name).
    allow_training_without_logprobs: bool = False
    # Choices sampled under response_format (art_sampling.constrained): their sampler logprobs are of
    # the constrained distribution, which the trainer does not score; refused unless this is set.
    allow_constrained_choices: bool = False
    # The optimizer's moments (Adam's): None starts fresh ones when the model's previous step was of
    # the other kind (SFT before this RL step: a warm start's moments point along SFT's gradient);
    # true always; false keeps them (service/optimizer_phase.py).
    reset_optimizer: bool | None = None

    @field_validator("length_normalization", mode="before")
    @classmethod
    def _renamed_none(cls, value: object) -> object:
        if value == "none":  # the name of earlier versions, for what was a token mean over the step
            raise ValueError(
                '"none" was renamed: it was a token mean over the step, now "token"; for Dr. GRPO\'s '
                'constant normaliser say "constant" (with normalization_tokens)'
            )
        return value

    @model_validator(mode="after")
    def _check_kl(self) -> GRPOConfig:
        if self.kl_ref_step is not None and not self.kl_coef:
            raise ValueError(
                f"kl_ref_step {self.kl_ref_step} names the KL penalty's reference, but kl_coef is 0: set kl_coef "
                "above 0 (or leave kl_ref_step out)"
            )
        return self

    @property
    def scales_rewards(self) -> bool:
        """Whether advantages are divided by the group's reward std (scale_rewards, or its mode's default)."""
        return self.scale_rewards if self.scale_rewards is not None else self.length_normalization != "constant"

    @property
    def clip_range(self) -> tuple[float, float]:
        """(eps_low, eps_high): as given, else the defaults of the ratio in use. A sequence ratio (the
        exp of a mean log ratio) moves far less than a token's, so GSPO clips it at 3e-4 / 4e-4."""
        low, high = (3e-4, 4e-4) if self.importance_sampling == "sequence" else (0.2, 0.28)
        return (self.eps_low if self.eps_low is not None else low, self.eps_high if self.eps_high is not None else high)
