"""Where a trainable model's files live:

<data_dir>/<project>/models/<name>/
    model.json                          name, project, base model, LoRA config
    history.jsonl                       one row of metrics per step and logged split
    trajectories/<split>/<step:04d>.jsonl
    checkpoints/<step:04d>/             a PEFT adapter folder (+ optimizer.pt, state.json)
    logs/
    reports/<tracker>.json              a tracker reporter's run id and how many rows it has sent
    wandb/                              Weights & Biases' files of the model's run (unless WANDB_DIR)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.names import check_name


@dataclass(frozen=True)
class ModelPaths:
    root: Path

    @classmethod
    def of(cls, data_dir: Path, project: str, name: str) -> ModelPaths:
        check_name("project", project)
        check_name("model", name)
        return cls(data_dir / project / "models" / name)

    @property
    def model_json(self) -> Path:
        return self.root / "model.json"

    @property
    def history(self) -> Path:
        return self.root / "history.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def report_state(self, tracker: str) -> Path:
        return self.root / "reports" / f"{tracker}.json"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"{step:04d}"

    def trajectories(self, split: str, step: int) -> Path:
        check_name("split", split)
        return self.root / "trajectories" / split / f"{step:04d}.jsonl"
