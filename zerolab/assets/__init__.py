"""Files bundled with zerolab (GPT-2's vocabulary)."""

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent
GPT2_VOCAB = ASSETS_DIR / "gpt2" / "vocab.json"
GPT2_MERGES = ASSETS_DIR / "gpt2" / "merges.txt"
EOT_TOKEN_ID = 50256
