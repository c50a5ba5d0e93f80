"""The phases `zerolab ladder` asks the speed ladder (zerolab.rank.speed_ladder) to run."""

from __future__ import annotations

from zerolab.contracts import SWITCHES, Phase

EVERY_SWITCH = "every switch"
"""The last state the ladder measures: every switch on, those that change the arithmetic too."""


def standard_phases() -> tuple[Phase, ...]:
    """The engine as it is; dropout 0; each switch proven equal added in turn (the defaults' end
    state); that end state with each switch that changes the arithmetic or the reduction; every
    switch at once; then leave-one-out at the defaults' end state. The phases a user reads first
    come first: a ladder cut short by its time keeps them. The first phase, the defaults' end state
    and every switch at once are inspected."""
    equal = [switch.name for switch in SWITCHES if switch.equal]
    other = [switch.name for switch in SWITCHES if not switch.equal]
    phases = [Phase("engine as it is", (), inspect=True), Phase("dropout 0", (), dropout_zero=True)]
    for index, name in enumerate(equal):
        phases.append(Phase(f"+ {name}", tuple(equal[: index + 1]), True, inspect=index == len(equal) - 1))
    for name in other:
        phases.append(Phase(f"all + {name}", (*equal, name), True))
    phases.append(Phase(EVERY_SWITCH, (*equal, *other), True, inspect=True))
    for name in equal:
        phases.append(Phase(f"all but {name}", tuple(n for n in equal if n != name), True))
    return tuple(phases)
