"""The pinned engine's examples_deepspeed GPT scripts as zerolab recipes: each run at its defaults
with stub launchers, its launch ported by `zerolab from-command`'s code and rendered back, both
resolved by Megatron's parser and DeepSpeed's config classes (zerolab.porting.survey). Writes
benchmarks/results/upstream_scripts.md: `python benchmarks/upstream_scripts.py` (needs the engine,
`make setup`; the scripts are read from its checkout, never copied here)."""

from __future__ import annotations

import sys
from collections import Counter

from zerolab.engine.paths import engine_dir, engine_missing
from zerolab.locations import REPO_ROOT
from zerolab.porting.survey import survey

OUT = REPO_ROOT / "benchmarks" / "results" / "upstream_scripts.md"
KINDS = ("native", "extra", "refused by the engine", "refused by zerolab")
LABELS = {
    "native": "expressible with native recipe keys",
    "extra": "expressible only through `extra.megatron_args` / `extra.ds_config`",
    "refused by the engine": "not expressible: the engine refuses the script's own launch at its defaults",
    "refused by zerolab": "not expressible: zerolab refuses (a missing native key or a check)",
}


def main() -> int:
    missing = engine_missing()
    if missing:
        print(f"upstream_scripts: needs the engine: {missing}", file=sys.stderr)
        return 2
    verdicts = survey(engine_dir())
    counts = Counter(verdict.kind for verdict in verdicts)
    total = len(verdicts)
    lines = [
        "# The upstream GPT scripts as recipes",
        "",
        "Written by `python benchmarks/upstream_scripts.py` on the pinned engine's `examples_deepspeed/`:",
        "each script that launches `pretrain_gpt.py` run at its defaults (8 GPUs a node, stub launchers),",
        "its launch ported by `zerolab from-command`'s code, rendered back, and both resolved by",
        "Megatron's parser and DeepSpeed's config classes. Every value the render changes is named with",
        "why (`unexplained` counts those named without).",
        "",
        "| verdict | scripts |",
        "|---|---|",
        *(f"| {LABELS[kind]} | {counts[kind]} ({100 * counts[kind] / total:.0f}%) |" for kind in KINDS),
        f"| expressible in all | {counts['native'] + counts['extra']} of {total} |",
        "",
        "| script | verdict | values differing (unexplained) | extra flags and ds_config keys | why not |",
        "|---|---|---|---|---|",
    ]
    for verdict in verdicts:
        ported = verdict.ported
        extra = ""
        differing = ""
        if ported is not None:
            flags = [token for token in ported.recipe.extra.megatron_args if token.startswith("--")]
            extra = " ".join([*flags, *ported.recipe.extra.ds_config])
            differing = f"{len(ported.differences)} ({len(verdict.unexplained)})"
        reason = verdict.reason.replace("|", "/").replace("\n", " ")[:200]
        lines.append(f"| {verdict.script} | {verdict.kind} | {differing} | {extra} | {reason} |")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}: " + ", ".join(f"{kind} {counts[kind]}" for kind in KINDS) + f" of {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
