"""gangsat's settings file: what an operator mounts from a ConfigMap (``gangsat.yaml``).

One pydantic model, so a bad file is refused with the path of the bad field before the
scheduler starts. The objective weights live in ``solver.weights``: the snippet
``gangsat-bench tune`` recommends is a settings file of exactly this shape.

    schedulerNames: [gangsat]
    scheduler: cpsat
    cycleSeconds: 1.0
    solver:
      time_limit_s: 1.0
      weights: {value: 100, fairness: 300, overuse: 0, priority: 400, gang_start: 0,
                packing: 5, gpu_node_open: 10}
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from adapter.errors import validation_lines
from adapter.strict_yaml import StrictLoader
from solver.config import SolverConfig

log = logging.getLogger(__name__)

# The name a pod without ``schedulerName`` gets: kube-scheduler's, which managed clusters
# run whatever else does.
KUBE_SCHEDULER = "default-scheduler"


class SettingsError(ValueError):
    """A settings file that cannot be used; one line per problem, naming the field."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    scheduler_names: tuple[Annotated[str, Field(min_length=1)], ...] = Field(
        default=("gangsat",),
        alias="schedulerNames",
        min_length=1,
        description="pods whose spec.schedulerName is one of these are ours",
    )
    scheduler: Literal["cpsat", "gang-greedy", "greedy"] = "cpsat"
    cycle_s: float = Field(default=1.0, gt=0, le=86_400, allow_inf_nan=False, alias="cycleSeconds")
    solver: SolverConfig = Field(default_factory=SolverConfig)

    @model_validator(mode="after")
    def _warn_of_a_shared_name(self) -> Settings:
        """Warned, not refused: right where kube-scheduler is stopped (a cluster of one's
        own); where it runs, both bind the same pods, and a gang may end bound in part."""
        if KUBE_SCHEDULER in self.scheduler_names:
            log.warning(
                "schedulerNames lists %s: where kube-scheduler runs (every managed cluster), "
                "it binds those pods too, one at a time, and gangs may end bound in part",
                KUBE_SCHEDULER,
            )
        return self

    @classmethod
    def from_yaml(cls, text: str, source: str = "settings") -> Settings:
        try:
            raw = yaml.load(text, Loader=StrictLoader)
        except yaml.YAMLError as e:
            raise SettingsError(f"{source}: not YAML: {e}") from None
        raw = raw if raw is not None else {}
        try:
            return cls.model_validate(raw)
        except ValidationError as e:
            raise SettingsError("\n".join(validation_lines(source, e, raw))) from None

    @classmethod
    def load(cls, path: Path) -> Settings:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise SettingsError(f"{path}: cannot read: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            # A ValueError, not an OSError: uncaught, a reload of a bad file ended the loop.
            raise SettingsError(f"{path}: not UTF-8 (byte {e.start}: {e.reason})") from None
        return cls.from_yaml(text, str(path))

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", by_alias=True)
        return yaml.safe_dump(data, sort_keys=False)
