#!/usr/bin/env bash
# OpenWebText -> data/owt_text_document.{bin,idx} (HF datasets streamed, or --input FILES).
# Extra arguments go to `zerolab prep openwebtext`, e.g. --input owt.jsonl.zst --split 98,1,1
set -euo pipefail
cd "$(dirname "$0")/.."
zerolab=zerolab
if [[ -x .venv/bin/zerolab ]]; then zerolab=.venv/bin/zerolab; fi
exec "$zerolab" prep openwebtext --out "${OUT:-data/owt}" "$@"
