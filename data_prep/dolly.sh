#!/usr/bin/env bash
# databricks-dolly-15k -> data/dolly_text_document.{bin,idx} (HF datasets, or --input FILE).
# Extra arguments go to `zerolab prep dolly`, e.g. --input data_prep/samples/dolly151.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
zerolab=zerolab
if [[ -x .venv/bin/zerolab ]]; then zerolab=.venv/bin/zerolab; fi
exec "$zerolab" prep dolly --out "${OUT:-data/dolly}" "$@"
