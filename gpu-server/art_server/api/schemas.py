"""Request and response models of the HTTP API (pydantic), in one place.

The TypeScript side mirrors these with zod (lib/core/wire.ts); tests keep the two in step.

Over 400 lines: the whole wire contract in one place, the file lib/core/wire.ts mirrors and tests compare model by model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import JsonDict

from ..chat.structured import check_schema
from ..core.bounds import MAX_PRICE_PER_HOUR, MAX_REPORTED_TRAJECTORIES, MAX_TOKEN_ID, MAX_TOKENS_PER_SEQUENCE
from ..core.distribution import unscored_fields, unscored_message
from ..core.json_types import INTEGRAL, WholeNumber
from ..core.names import ADAPTER_PATTERN, NAME_PATTERN, RESERVED_PROJECTS
from ..trainer.grpo_config import GRPOConfig
from ..trainer.lora import LoraSpec
from ..trainer.sft import SFTConfig

# Bounds of what one request may ask for: each is far past real use, and keeps every value a number
# the trainer can sum, exponentiate and index with (no overflow, no out-of-range token id).
MAX_ABS_REWARD = 1e6
MAX_ABS_METRIC = 1e12
LOGPROB_TOLERANCE = 1e-3  # sampled logprobs are <= 0; float rounding may leave a hair above
MAX_INT64 = 2**63 - 1
# Nesting of free-form JSON (metadata, tool parameters, extra fields): far past any real schema, and
# well inside what the JSON encoders can write back (pydantic and orjson stop near 255 levels).
MAX_JSON_DEPTH = 64


def _bounded_depth(value: Any) -> Any:
    """`value` unchanged; a ValueError (a 400) when it nests objects or arrays deeper than MAX_JSON_DEPTH."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels of objects and arrays")
        stack.extend((child, depth + 1) for child in children)
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_bounded_depth)]


class _Open(BaseModel):
    """A model that passes unknown fields through (OpenAI's shapes grow), with their nesting bounded."""

    model_config = ConfigDict(extra="allow", strict=True)

    @model_validator(mode="after")
    def _bounded_extra(self) -> Any:
        if self.__pydantic_extra__:
            _bounded_depth(self.__pydantic_extra__)
        return self


class FunctionCall(BaseModel):
    model_config = ConfigDict(strict=True)
    name: str
    arguments: str | JsonObject = "{}"


class ToolCall(_Open):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(_Open):
    type: str = Field(json_schema_extra={"const": "text"})
    text: str | None = None

    @field_validator("type")
    @classmethod
    def _text_only(cls, kind: str) -> str:
        if kind != "text":  # checked here, not only when rendered: /log renders nothing
            raise ValueError(f"content part of type {kind!r} is not supported (only 'text')")
        return kind


class ChatMessage(_Open):
    # The rules of the validator below, in the published schema too (extra and strict: from _Open).
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "if": {"properties": {"role": {"const": "tool"}}},
                    "then": {"required": ["tool_call_id"], "properties": {"tool_call_id": {"type": "string", "minLength": 1}}},
                },
                {
                    "if": {"properties": {"role": {"not": {"const": "assistant"}}}},
                    "then": {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
                },
            ]
        },
    )

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _check_role_fields(self) -> ChatMessage:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        if self.role != "assistant" and self.content is None:
            raise ValueError(f"a {self.role} message needs content")
        return self


class FunctionDef(_Open):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: JsonObject | None = None


class Tool(BaseModel):
    model_config = ConfigDict(strict=True)
    type: Literal["function"]
    function: FunctionDef


class StreamOptions(_Open):
    include_usage: bool = False


_STOP_LIST: JsonDict = {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 16}
# Sampling penalties would change the distribution the trainer needs (core/distribution.UNSCORED):
# only their neutral values are accepted.
_ZERO_OR_NULL: JsonDict = {"anyOf": [{"const": 0}, {"type": "null"}]}
_ONE_OR_NULL: JsonDict = {"anyOf": [{"const": 1}, {"type": "null"}]}


_JSON_SCHEMA_FORMAT: JsonDict = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "schema"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 64},
        "schema": {"type": "object"},
        "strict": {"type": ["boolean", "null"]},
        "description": {"type": ["string", "null"]},
    },
}


class ResponseFormat(BaseModel):
    """OpenAI's `response_format`: free text, any JSON object, or JSON that follows a schema
    (enforced while sampling: chat/structured.py)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={  # json_schema goes with type json_schema, and only there (checked in _check_schema)
            "if": {"properties": {"type": {"const": "json_schema"}}},
            "then": {"required": ["json_schema"], "properties": {"json_schema": {"type": "object"}}},
            "else": {"properties": {"json_schema": {"type": "null"}}},
        },
    )
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonObject | None = Field(None, json_schema_extra={"anyOf": [_JSON_SCHEMA_FORMAT, {"type": "null"}]})

    @model_validator(mode="after")
    def _check_schema(self) -> ResponseFormat:
        if self.type != "json_schema":
            if self.json_schema is not None:
                raise ValueError(f"json_schema goes with type 'json_schema', not {self.type!r}")
            return self
        spec = self.json_schema
        if spec is None or not isinstance(spec.get("schema"), dict):
            raise ValueError("type 'json_schema' needs json_schema: {name, schema}, the schema a JSON object")
        name = spec.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 64:
            raise ValueError("json_schema.name must be a string of 1 to 64 characters")
        unknown = set(spec) - {"name", "schema", "strict", "description"}
        if unknown:
            raise ValueError(f"json_schema takes name, schema, strict and description, not {sorted(unknown)}")
        check_schema(spec["schema"])
        return self


class ChatCompletionRequest(_Open):
    """The OpenAI chat-completions request, plus vLLM's extras the client may send."""

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | JsonObject | None = Field(
        None, json_schema_extra={"anyOf": [{"enum": ["none", "auto"]}, {"type": "null"}]}
    )
    n: WholeNumber = Field(1, ge=1, le=1024)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: Annotated[int, Field(ge=-1, le=MAX_TOKEN_ID), INTEGRAL] | None = None
    # vLLM's min-p: tokens below min_p x the likeliest token's probability are dropped (scored exactly).
    min_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    max_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS_PER_SEQUENCE), INTEGRAL] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS_PER_SEQUENCE), INTEGRAL] | None = None
    stop: str | list[str] | None = Field(
        None, json_schema_extra={"anyOf": [{"type": "string", "minLength": 1}, _STOP_LIST, {"type": "null"}]}
    )
    seed: Annotated[int, Field(ge=-MAX_INT64 - 1, le=MAX_INT64), INTEGRAL] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20), INTEGRAL] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    # vLLM extras accepted for compatibility: token ids are always returned.
    return_token_ids: bool | None = None
    frequency_penalty: float | None = Field(None, json_schema_extra=_ZERO_OR_NULL)
    presence_penalty: float | None = Field(None, json_schema_extra=_ZERO_OR_NULL)
    repetition_penalty: float | None = Field(None, json_schema_extra=_ONE_OR_NULL)
    logit_bias: dict[str, float] | None = Field(None, json_schema_extra={"maxProperties": 0})

    model_config = ConfigDict(
        json_schema_extra={  # top_logprobs needs logprobs: true (extra and strict: from _Open)
            "if": {"required": ["top_logprobs"], "properties": {"top_logprobs": {"type": "integer", "minimum": 1}}},
            "then": {"required": ["logprobs"], "properties": {"logprobs": {"const": True}}},
        },
    )

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        items = [value] if isinstance(value, str) else value or []
        if len(items) > 16 or any(not s for s in items):
            raise ValueError("stop takes up to 16 non-empty strings")
        return value

    @model_validator(mode="after")
    def _check_combinations(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        unscored = unscored_fields({**self.__dict__, **(self.__pydantic_extra__ or {})})
        if unscored:
            raise ValueError(unscored_message(unscored))
        if isinstance(self.tool_choice, dict) or self.tool_choice == "required":
            raise ValueError("tool_choice supports 'auto' and 'none'")
        return self


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "art"
    root: str
    parent: str | None = None
    source: dict[str, Any] | None = Field(
        default=None, description="base model only: where its weights came from (builtin, folder, hf-cache, packaged-gguf)"
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class LoadAdapterRequest(BaseModel):
    """vLLM's runtime LoRA request shape: `lora_name` is `name@step`."""

    model_config = ConfigDict(strict=True)

    lora_name: str = Field(min_length=1, max_length=200, json_schema_extra={"pattern": ADAPTER_PATTERN})
    lora_path: str = Field(min_length=1, max_length=4096)


class UnloadAdapterRequest(BaseModel):
    model_config = ConfigDict(strict=True)
    lora_name: str = Field(min_length=1, max_length=200, json_schema_extra={"pattern": ADAPTER_PATTERN})


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    engine: str | None
    base_model: str | None


# -- training ------------------------------------------------------------------------------------


class RegisterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    # Checked by core/names.py (with messages that say the rule); the patterns publish it.
    name: str = Field(min_length=1, max_length=64, json_schema_extra={"pattern": NAME_PATTERN})
    project: str = Field(
        min_length=1,
        max_length=64,
        json_schema_extra={"pattern": NAME_PATTERN, "not": {"enum": list(sorted(RESERVED_PROJECTS))}},
    )
    base_model: str = Field(min_length=1, max_length=512)
    lora: LoraSpec | None = None
    # Experiment tracking (art_server/report/): the trackers this model's history rows go to; left
    # out, the server's --report. An empty list reports nowhere.
    report: list[Literal["wandb", "trackio"]] | None = Field(None, max_length=2)
    report_trajectories: Annotated[int, Field(ge=0, le=MAX_REPORTED_TRAJECTORIES), INTEGRAL] | None = Field(
        None, description="trajectories of each step sent to the trackers as a table"
    )


class SamplingIn(BaseModel):
    """The sampling parameters a choice was drawn with, as the server records them (`art_sampling`)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    temperature: float = Field(ge=0, le=10, allow_inf_nan=False)
    top_p: float = Field(gt=0, le=1, allow_inf_nan=False)
    top_k: WholeNumber = Field(ge=0, le=MAX_TOKEN_ID)
    min_p: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)  # absent from older servers: 0
    # response_format constrained the choice (the trainer refuses it unless allow_constrained_choices)
    constrained: bool = False
    engine: str = Field(min_length=1, max_length=32)


class SampledChoice(_Open):
    """An assistant turn sampled from this server: what the trainer trains on."""

    kind: Literal["choice"]
    message: JsonObject
    prompt_token_ids: list[Annotated[int, Field(ge=0, le=MAX_TOKEN_ID), INTEGRAL]] | None = Field(
        None, max_length=MAX_TOKENS_PER_SEQUENCE
    )
    token_ids: list[Annotated[int, Field(ge=0, le=MAX_TOKEN_ID), INTEGRAL]] | None = Field(
        None, max_length=MAX_TOKENS_PER_SEQUENCE
    )
    # The logprob of each sampled token under the distribution it was sampled from: finite, <= 0.
    logprobs: list[Annotated[float, Field(allow_inf_nan=False, ge=-1e4, le=LOGPROB_TOLERANCE)]] | None = Field(
        None, max_length=MAX_TOKENS_PER_SEQUENCE
    )
    finish_reason: str | None = None
    # Which server and base model sampled it (see core/provenance.py); absent on hand-built choices.
    art_provenance: str | None = Field(None, max_length=256)
    # The trained model's step that sampled it (absent for the base model and hand-built choices).
    art_policy_step: Annotated[int, Field(ge=0, le=10**9), INTEGRAL] | None = None
    # The sampling parameters it was drawn with; the trainer scores it with them (absent: hand-built).
    art_sampling: SamplingIn | None = None


class TrajectoryIn(_Open):
    messages_and_choices: list[SampledChoice | ChatMessage] = Field(min_length=1, max_length=10_000)
    tools: list[Tool] | None = None
    reward: float = Field(allow_inf_nan=False, ge=-MAX_ABS_REWARD, le=MAX_ABS_REWARD)
    metrics: dict[str, bool | Annotated[float, Field(allow_inf_nan=False, ge=-MAX_ABS_METRIC, le=MAX_ABS_METRIC)]] = Field(
        default_factory=dict
    )
    metadata: JsonObject = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)


class GroupsBody(BaseModel):
    """A body carrying trajectory groups: at least one group, none of them empty."""

    model_config = ConfigDict(extra="forbid", strict=True)
    groups: list[Annotated[list[TrajectoryIn], Field(max_length=1024, json_schema_extra={"minItems": 1})]] = Field(
        min_length=1, max_length=10_000
    )
    # What judging these groups took (the client's judge calls, their tokens and, at the judge's price,
    # their cost): recorded in the step's or the log's history row.
    judge_calls: WholeNumber = Field(0, ge=0, le=10**9)
    judge_prompt_tokens: WholeNumber = Field(0, ge=0, le=10**12)
    judge_completion_tokens: WholeNumber = Field(0, ge=0, le=10**12)
    judge_cost_usd: float | None = Field(None, ge=0, le=10**9, allow_inf_nan=False)

    def judge_usage(self) -> dict[str, float]:
        """The judge's fields as history metrics (those not sent are left out)."""
        usage = {
            "judge_calls": self.judge_calls,
            "judge_prompt_tokens": self.judge_prompt_tokens,
            "judge_completion_tokens": self.judge_completion_tokens,
        }
        return {
            **({k: v for k, v in usage.items() if v} if self.judge_calls else {}),
            **({"judge_cost_usd": self.judge_cost_usd} if self.judge_cost_usd is not None else {}),
        }

    @field_validator("groups")
    @classmethod
    def _no_empty_groups(cls, groups: list[list[TrajectoryIn]]) -> list[list[TrajectoryIn]]:
        empty = [i for i, g in enumerate(groups) if not g]
        if empty:
            raise ValueError(f"group {empty[0]} is empty: every group needs trajectories")
        return groups


PRICE = (
    "What an hour of the server's machine costs, in US dollars (default: the server's --gpu-cost-per-hour-usd): "
    "the step records cost_usd for its sampling_seconds and its own wall time"
)


class TrainRequest(GroupsBody):
    config: GRPOConfig = Field(default_factory=GRPOConfig)  # pyright: ignore[reportArgumentType]  (every field has a default)
    serve_previous_during_training: bool = False
    # What a pipelined client did with groups too far behind before sending this step (recorded in its metrics).
    stale_groups_dropped: WholeNumber = Field(0, ge=0, le=10**6)
    stale_groups_retried: WholeNumber = Field(0, ge=0, le=10**6)
    # How fast the client's rollouts of this step sampled (its completion tokens over its gathering's
    # wall time), recorded as sampling_tokens_per_second beside the trainer's own tokens per second.
    sampled_tokens: WholeNumber = Field(0, ge=0, le=10**12)
    sampling_seconds: float = Field(0.0, ge=0, le=10**7, allow_inf_nan=False)
    gpu_cost_per_hour_usd: float | None = Field(None, ge=0, le=MAX_PRICE_PER_HOUR, allow_inf_nan=False, description=PRICE)


class Conversation(_Open):
    messages: list[ChatMessage] = Field(
        min_length=1,
        max_length=10_000,
        # SFT learns the assistant's turns, each after what it answers (checked in trainer/sft.py). Not in
        # the schema as `contains`: schemathesis's generator does not finish on it (> 200 s for this route).
        description="At least one assistant message, and not as the first message: each assistant turn is learned after what it answers",
    )
    tools: list[Tool] | None = None


class SFTRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    conversations: list[Conversation] = Field(min_length=1, max_length=100_000)
    config: SFTConfig = Field(default_factory=SFTConfig)  # pyright: ignore[reportArgumentType]  (every field has a default)
    gpu_cost_per_hour_usd: float | None = Field(None, ge=0, le=MAX_PRICE_PER_HOUR, allow_inf_nan=False, description=PRICE)

    @model_validator(mode="after")
    def _bounded_work(self) -> SFTRequest:
        passes = len(self.conversations) * self.config.epochs
        if passes > 1_000_000:
            raise ValueError(
                f"{len(self.conversations)} conversations x {self.config.epochs} epochs = {passes} passes, over this "
                "server's limit of 1,000,000 per step: split the data over several steps"
            )
        return self


class LogRequest(GroupsBody):
    split: str = Field("val", min_length=1, max_length=64, json_schema_extra={"pattern": NAME_PATTERN})
    # The step the groups were sampled at (default: the current one), e.g. an evaluation of step s
    # logged while step s + 1 trains. At most the current step.
    step: Annotated[int, Field(ge=0, le=10**9), INTEGRAL] | None = None


class ForkRequest(BaseModel):
    """Fork another model's checkpoint into this (registered) model: the parent's latest checkpoint at
    or before `not_after_step` (default: its latest), from `from_project` (default: this model's)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    from_model: str = Field(min_length=1, max_length=64, json_schema_extra={"pattern": NAME_PATTERN})
    from_project: str | None = Field(None, min_length=1, max_length=64, json_schema_extra={"pattern": NAME_PATTERN})
    not_after_step: Annotated[int, Field(ge=0, le=10**9), INTEGRAL] | None = None
    # A model that has trained keeps its run unless asked: its checkpoints and history are replaced.
    overwrite: bool = False


class DeleteCheckpointsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    keep_best_by: str = Field("val/reward", pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+$")
