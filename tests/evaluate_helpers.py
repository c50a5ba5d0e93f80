"""What the evaluation tests, with and without the engine, compare with."""

from __future__ import annotations

FIRST_HELLASWAG_ROW = {  # Rowan/hellaswag's first validation row (rowanz/hellaswag's data/README example)
    "activity_label": "Roof shingle removal",
    "ctx_a": "A man is sitting on a roof.",
    "ctx_b": "he",
    "ctx": "A man is sitting on a roof. he",
    "endings": [
        "is using wrap to wrap a pair of skis.",
        "is ripping level tiles off.",
        "is holding a rubik's cube.",
        "starts pulling up roofing on a roof.",
    ],
    "label": "3",
}
