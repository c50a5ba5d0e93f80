#!/usr/bin/env bash
# Launches the recipe beside this script with the same name (gpt2_z1.sh -> gpt2_z1.yaml)
# with `zerolab launch`; arguments pass through: --dry-run, key.path=value overrides.
# Every recipe's script is this same file: the YAML is the single source of truth.
set -euo pipefail
script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
root="$(dirname "$script")"
while [[ ! -f "$root/pyproject.toml" && "$root" != / ]]; do root="$(dirname "$root")"; done
zerolab="$root/.venv/bin/zerolab"
[[ -x "$zerolab" ]] || zerolab="zerolab"
exec "$zerolab" launch "${script%.sh}.yaml" "$@"
