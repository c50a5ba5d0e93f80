"""zerolab: what each ZeRO and parallelism setup costs and buys when training GPT-2
with Megatron-DeepSpeed, measured reproducibly."""

__version__ = "0.1.0"
