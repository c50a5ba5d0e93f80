"""The phases `zerolab ladder` asks the speed ladder (zerolab.rank.speed_ladder) to run."""

from __future__ import annotations

from zerolab.contracts import SWITCHES, Phase


def standard_phases() -> tuple[Phase, ...]:
    """The engine as it is; dropout 0; each switch proven equal added in turn (the defaults' end
    state); leave-one-out at that end state; then the end state with the switches that change the
    arithmetic too. The first phase and the end state are inspected."""
    equal = [switch.name for switch in SWITCHES if switch.equal]
    other = [switch.name for switch in SWITCHES if not switch.equal]
    phases = [Phase("engine as it is", (), inspect=True), Phase("dropout 0", (), dropout_zero=True)]
    for index, name in enumerate(equal):
        phases.append(Phase(f"+ {name}", tuple(equal[: index + 1]), True, inspect=index == len(equal) - 1))
    for name in equal:
        phases.append(Phase(f"all but {name}", tuple(n for n in equal if n != name), True))
    for name in other:
        phases.append(Phase(f"all + {name}", (*equal, name), True))
    return tuple(phases)
