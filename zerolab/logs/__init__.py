"""What runs wrote, read: log lines (`lines`), the Megatron and DeepSpeed formats (`megatron`,
`deepspeed`), the argument dump (`config_dump`), how a run ended (`failures`, `signals`), and the
parser that puts them together (`parse`). It sits below everything that reads logs: launch (the
cause in status.json), sweep (progress), estimate (calibration) and summarize (the report)."""
