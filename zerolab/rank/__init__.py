"""What runs in the engine's Python: every training rank (megatron_entry with the workarounds and the
opt-in patches; finetune_loop) and the scripts zerolab runs there (export, import, scoring, sampling,
probes and checks). Imports only the standard library, the engine's stack, itself and
zerolab.contracts (pyproject.toml's import contracts hold it to that)."""
