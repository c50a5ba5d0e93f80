"""The training engine: Megatron-DeepSpeed at a pinned commit, and the stack it runs on."""
