"""Where each recipe key goes, declared on its schema field (`field(..., to=...)`): a Megatron
argument, a DeepSpeed config key, an environment variable, the launcher, or zerolab itself. The
render is generic over the one-to-one ones (a `rule` marks those it derives in code), and the
generated reference shows every field's destinations, as GPT-NeoX's argument classes declare
what goes into the DeepSpeed JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class Megatron:
    """A pretrain_gpt.py argument: the field's value (a true bool is a bare switch), or as `rule` says."""

    flag: str
    rule: str | None = None

    def describe(self) -> str:
        return f"Megatron `{self.flag}`" + (f" ({self.rule})" if self.rule else "")


@dataclass(frozen=True)
class DeepSpeed:
    """A ds_config key (dotted path): the field's value at the ZeRO `stages` that read it, or as
    `rule` says."""

    key: str
    stages: tuple[int, ...] | None = None
    rule: str | None = None

    def describe(self) -> str:
        where = ""
        if self.stages is not None:
            where = (
                f"stage {self.stages[0]}"
                if len(self.stages) == 1
                else f"stages {self.stages[0]}-{self.stages[-1]}"
            )
        notes = ", ".join(part for part in (where, self.rule) if part)
        return f"ds_config `{self.key}`" + (f" ({notes})" if notes else "")


@dataclass(frozen=True)
class Env:
    """An environment variable of every rank."""

    name: str
    rule: str | None = None

    def describe(self) -> str:
        return f"env `{self.name}`" + (f" ({self.rule})" if self.rule else "")


@dataclass(frozen=True)
class Launcher:
    """The launcher's command line (torchrun or deepspeed)."""

    what: str

    rule = "derived"

    def describe(self) -> str:
        return f"launcher {self.what}"


@dataclass(frozen=True)
class Zerolab:
    """Read by zerolab itself: checks, run.json, summaries, estimates."""

    what: str

    rule = "derived"

    def describe(self) -> str:
        return f"zerolab: {self.what}"


Destination = Megatron | DeepSpeed | Env | Launcher | Zerolab


def destinations(info: FieldInfo) -> list[Destination]:
    """The destinations declared on a schema field."""
    return [
        item for item in info.metadata if isinstance(item, Megatron | DeepSpeed | Env | Launcher | Zerolab)
    ]


def one_to_one(info: FieldInfo, kind: type[Any]) -> list[Any]:
    """The field's destinations of `kind` that take its value as it is (no rule)."""
    return [item for item in destinations(info) if isinstance(item, kind) and item.rule is None]
