"""Files bundled with zerolab (GPT-2's vocabulary)."""

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent
GPT2_VOCAB = ASSETS_DIR / "gpt2" / "vocab.json"
GPT2_MERGES = ASSETS_DIR / "gpt2" / "merges.txt"
EOT_TOKEN_ID = 50256
GPT2_SHA256 = {
    GPT2_VOCAB: "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    GPT2_MERGES: "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
"""The files' published sha256 (the ones tiktoken expects for OpenAI's GPT-2 files)."""
