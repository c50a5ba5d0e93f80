#!/usr/bin/env bash
# WikiText-103 (raw) -> data/wikitext103_{train,valid,test}_text_document.{bin,idx} (HF datasets).
# Extra arguments go to `zerolab prep wikitext`, e.g. --version 2, or --train wiki.train.raw ...
set -euo pipefail
cd "$(dirname "$0")/.."
zerolab=zerolab
if [[ -x .venv/bin/zerolab ]]; then zerolab=.venv/bin/zerolab; fi
exec "$zerolab" prep wikitext --out "${OUT:-data/wikitext103}" "$@"
