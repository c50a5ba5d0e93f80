"""Bad recipes are refused before anything launches: exit 2, a message naming the key
(or file) and nothing written. Each case runs the real CLI in-process."""

from __future__ import annotations

import json
import socket

import pytest

from zerolab.cli import main
from zerolab.errors import UserError
from zerolab.recipe.yaml_io import read_yaml_mapping

GPT2 = "recipes/gpt2_z1.yaml"
TINY = "recipes/cpu/tiny_z1.yaml"

# (id, recipe file or YAML text for a temporary recipe, overrides, strings the message must contain)
OVERRIDE_CASES = [
    (
        "a hidden size no model has",
        TINY,
        ["model.hidden_size=1000000"],
        ["`model.hidden_size` = 1000000", "less than or equal to 65536"],
    ),
    (
        "a global batch beyond any run",
        TINY,
        ["train.global_batch_size=100000000000000000000000"],
        ["`train.global_batch_size`", "less than or equal to 16777216"],
    ),
    (
        "a global batch just off a multiple is suggested the nearest, exactly",
        TINY,
        ["train.global_batch_size=16777215"],
        ["not a multiple of micro batch 2 x data parallel 2 = 4", "e.g. 16777216"],
    ),
    (
        "both dataset layouts",
        TINY,
        ["data.train_path=data/dolly_train_text_document"],
        ["give one dataset layout", "set data.path=null to use the split datasets"],
    ),
    (
        "a validation split without a training one",
        TINY,
        ["data.valid_path=data/dolly_valid_text_document"],
        ["without a training one (data.train_path)"],
    ),
    (
        "no dataset at all",
        TINY,
        ["data.path=null"],
        ["no training data: data.path and data.train_path are both null"],
    ),
    (
        "misspelled section in an override blames the override",
        TINY,
        ["trian.iters=10"],
        ["override `trian.iters=10`: unknown key `trian`", "did you mean `train`"],
    ),
    (
        "unknown nested key in an override blames the override, not the building block",
        GPT2,
        ["model.foo.bar=1"],
        ["override `model.foo.bar=1`: unknown key `model.foo`"],
    ),
    (
        "unknown key",
        GPT2,
        ["train.micro_batchsize=4"],
        ["train.micro_batchsize", "did you mean `train.micro_batch_size`"],
    ),
    ("unknown section", GPT2, ["optimizer.lr=1"], ["unknown key `optimizer`", "valid keys here"]),
    (
        "misspelt section",
        GPT2,
        ["trian.iters=1"],
        ["override `trian.iters=1`: unknown key `trian`", "`train`"],
    ),
    (
        "unknown zero key",
        GPT2,
        ["zero.offload=true"],
        ["zero.offload", "did you mean `zero.offload_optimizer`"],
    ),
    ("zero stage 7", GPT2, ["zero.stage=7"], ["zero.stage", "0, 1, 2 or 3"]),
    ("lr not a number", GPT2, ["train.lr=fast"], ["train.lr", "valid number"]),
    (
        "negative micro batch",
        GPT2,
        ["train.micro_batch_size=-1"],
        ["train.micro_batch_size", "greater than 0"],
    ),
    ("fractional layers", GPT2, ["model.num_layers=4.5"], ["model.num_layers"]),
    ("bad device", GPT2, ["hardware.device=tpu"], ["hardware.device", "'cpu' or 'cuda'"]),
    ("bad launcher", GPT2, ["hardware.launcher=mpirun"], ["hardware.launcher"]),
    ("bad split", GPT2, ["data.split=train"], ["data.split"]),
    ("dropout of 1", GPT2, ["model.hidden_dropout=1.0"], ["model.hidden_dropout"]),
    ("port out of range", GPT2, ["hardware.master_port=70000"], ["hardware.master_port"]),
    ("malformed override", GPT2, ["train.micro_batch_size"], ["key.path=value"]),
    ("override base", GPT2, ["base=[]"], ["`base` cannot be overridden"]),
    ("unknown block override", GPT2, ["model=gpt2-13b"], ["model/gpt2-13b", "did you mean"]),
    ("override YAML error", GPT2, ["train.lr=[1"], ["override `train.lr=[1`", "not valid YAML"]),
    (
        "global batch not a multiple",
        GPT2,
        ["train.global_batch_size=30"],
        ["train.global_batch_size", "multiple of 8"],
    ),
    (
        "grad accum disagrees",
        GPT2,
        ["train.gradient_accumulation_steps=2"],
        ["train.gradient_accumulation_steps", "train.global_batch_size=16"],
    ),
    (
        "world not divisible by tp x pp",
        GPT2,
        ["parallel.tensor=3"],
        ["parallel.tensor", "not divisible by tensor x pipeline"],
    ),
    (
        "heads do not divide hidden",
        GPT2,
        ["model.num_attention_heads=24"],
        ["model.hidden_size", "model.num_attention_heads"],
    ),
    (
        "tensor does not divide heads",
        "recipes/gpt2_tp2_pp2.yaml",
        ["model=gpt2-124m", "model.num_attention_heads=3", "model.hidden_size=768"],
        ["parallel.tensor", "does not divide 3 attention heads"],
    ),
    (
        "pipeline does not divide layers",
        "recipes/gpt2_tp2_pp2.yaml",
        ["model.num_layers=47"],
        ["parallel.pipeline", "47 layers"],
    ),
    (
        "seq beyond positions",
        GPT2,
        ["model.seq_length=2048"],
        ["model.seq_length", "model.max_position_embeddings"],
    ),
    (
        "zero 2 with pipeline",
        "recipes/gpt2_tp2_pp2.yaml",
        ["zero=z2"],
        ["zero.stage", "parallel.pipeline", "DeepSpeed refuses"],
    ),
    (
        "zero 3 with pipeline",
        "recipes/gpt2_tp2_pp2.yaml",
        ["zero.stage=3"],
        ["zero.stage=3", "parallel.pipeline=2"],
    ),
    (
        "offload without zero",
        GPT2,
        ["zero.stage=0", "zero.offload_optimizer=true"],
        ["zero.offload_optimizer", "stage 1 or higher"],
    ),
    ("fp16 and bf16", GPT2, ["precision.fp16=true"], ["precision.fp16", "precision.bf16", "exclusive"]),
    ("fp16 on cpu", TINY, ["precision=fp16"], ["precision.fp16", "hardware.device", "not supported on CPU"]),
    (
        "world size mismatch",
        GPT2,
        ["hardware.world_size=4"],
        ["hardware.world_size", "nodes x processes per node = 2"],
    ),
    ("two training lengths", GPT2, ["train.tokens=1000000"], ["train.iters", "train.tokens", "exactly once"]),
    ("no training length", GPT2, ["train.iters=null"], ["train.iters", "exactly once"]),
    (
        "a TensorBoard option without TensorBoard",
        TINY,
        ["logging.log_batch_size=true"],
        ["log_batch_size: options of TensorBoard logging, which is off", "logging.tensorboard=true"],
    ),
    (
        "the engine's Triton FlashAttention on CPU",
        TINY,
        ["model.attention=flash-triton"],
        ["model.attention", "runs on CUDA GPUs only"],
    ),
    (
        "sequence parallelism through extra",
        GPT2,
        ['extra.megatron_args=[--ds-sequence-parallel-size, "2"]'],
        ["--ds-sequence-parallel-size: the recipe key parallel.sequence renders it"],
    ),
    (
        "sequence parallelism that does not divide the heads",
        GPT2,
        ["parallel.sequence=2"],
        ["sequence parallel 2 must divide the sequence length (1024) and the 25 attention heads"],
    ),
    (
        "sequence parallelism that does not divide the world",
        TINY,
        ["parallel.sequence=4"],
        ["world size 2 is not divisible by tensor x pipeline x sequence = 4", "parallel.sequence"],
    ),
    (
        "sequence parallelism on the pipeline engine",
        TINY,
        ["parallel.sequence=2", "parallel.pipeline=2", "hardware.procs_per_node=4"],
        ["DeepSpeed-Ulysses runs without the pipeline engine"],
    ),
    (
        "experts through extra",
        TINY,
        ['extra.megatron_args=[--num-experts, "4"]'],
        ["--num-experts: the recipe key moe.num_experts renders it"],
    ),
    (
        "options of experts on a dense model",
        TINY,
        ["moe.topk=2", "moe.param_group=true"],
        ["topk, param_group: options of the experts", "set moe.num_experts above 1"],
    ),
    (
        "more expert counts than MoE layers",
        TINY,
        ["moe.num_experts=[2,4]", "moe.param_group=true"],
        ["moe.num_experts gives 2 counts; the model has 1 MoE layers (one in 2 of 2)"],
    ),
    (
        "experts on no layer",
        TINY,
        ["moe.num_experts=2", "moe.expert_interval=3", "moe.param_group=true"],
        ["one layer in 3 is an MoE layer (moe.expert_interval) and the model has 2", "moe.expert_interval"],
    ),
    (
        "expert parallel beyond data parallel",
        TINY,
        ["moe.num_experts=4", "moe.expert_parallel=4", "moe.param_group=true"],
        ["expert parallel 4 must divide the data-parallel size 2", "moe.expert_parallel"],
    ),
    (
        "expert parallel that does not divide the experts",
        TINY,
        ["moe.num_experts=3", "moe.expert_parallel=2", "moe.param_group=true"],
        ["expert parallel 2 must divide each MoE layer's experts (3 do not divide)"],
    ),
    (
        "experts under ZeRO without their optimizer groups",
        TINY,
        ["moe.num_experts=2"],
        ["ZeRO stage 1 needs the experts' weights in optimizer groups of their own", "moe.param_group=true"],
    ),
    (
        "experts under ZeRO-3",
        "recipes/cpu/tiny_z3.yaml",
        ["moe.num_experts=2", "moe.param_group=true"],
        ["DeepSpeed's MoE layers do not train under ZeRO stage 3"],
    ),
    (
        "a top-k beyond the experts",
        TINY,
        ["moe.num_experts=2", "moe.topk=3", "moe.param_group=true"],
        ["each token goes to its top 3 experts, and an MoE layer has only 2"],
    ),
    (
        "a curriculum without where it starts",
        TINY,
        ["curriculum.enabled=true"],
        ["a curriculum needs min_seq_length and steps", "curriculum.steps"],
    ),
    (
        "a curriculum longer than the sequences",
        TINY,
        [
            "curriculum.enabled=true",
            "curriculum.min_seq_length=64",
            "curriculum.max_seq_length=256",
            "curriculum.steps=4",
        ],
        ["the curriculum grows from 64 to 256 tokens", "at most at the sequences' 128"],
    ),
    (
        "options of a curriculum that is off",
        TINY,
        ["curriculum.steps=4"],
        ["steps: options of the curriculum, which is off"],
    ),
    (
        "a root degree on the linear schedule",
        TINY,
        [
            "curriculum.enabled=true",
            "curriculum.min_seq_length=64",
            "curriculum.steps=4",
            "curriculum.root_degree=2",
        ],
        ["curriculum.root_degree is the fixed_root schedule's"],
    ),
    (
        "a curriculum of sequences split by Ulysses",
        GPT2,
        [
            "model=gpt2-355m",
            "parallel.sequence=2",
            "curriculum.enabled=true",
            "curriculum.min_seq_length=64",
            "curriculum.steps=4",
        ],
        ["DeepSpeed-Ulysses gives each rank a part of every sequence", "parallel.sequence"],
    ),
    (
        "a curriculum through extra",
        TINY,
        [
            'extra.ds_config={"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", '
            '"schedule_type": "fixed_linear"}}'
        ],
        ["extra.ds_config curriculum_learning: the curriculum section renders a seqlen curriculum"],
    ),
    (
        "distillation through extra",
        TINY,
        ["extra.megatron_args=[--kd]"],
        ["--kd: the recipe key distillation.kd renders it"],
    ),
    (
        "distillation without its teacher",
        TINY,
        ["distillation.kd=true", "distillation.teacher_num_layers=2"],
        ["distillation needs its teacher's checkpoint and shape: teacher, teacher_hidden_size"],
    ),
    (
        "a teacher without distillation",
        TINY,
        ["distillation.temperature=2.0"],
        ["temperature: options of distillation, which is off"],
    ),
    (
        "distillation on the pipeline engine",
        TINY,
        [
            "distillation.kd=true",
            "distillation.teacher=t",
            "distillation.teacher_num_layers=2",
            "distillation.teacher_hidden_size=64",
            "distillation.teacher_num_attention_heads=4",
            "parallel.pipeline=2",
            "zero=z0",
        ],
        ["the engine loads the teacher without the pipeline engine only"],
    ),
    (
        "distillation under ZeRO-3",
        TINY,
        [
            "distillation.kd=true",
            "distillation.teacher=t",
            "distillation.teacher_num_layers=2",
            "distillation.teacher_hidden_size=64",
            "distillation.teacher_num_attention_heads=4",
            "zero=z3",
        ],
        ["builds the student partitioned (zero.Init)", "set zero.stage to 0, 1 or 2 to distil"],
    ),
    (
        "a blend with a weight and no prefix",
        TINY,
        ["data.path=0.5 data/a_text_document 0.5"],
        ["data.path '0.5 data/a_text_document 0.5' is read as a weighted blend", "3 words", "W1 PREFIX1"],
    ),
    (
        "a blend whose weight is not a number",
        TINY,
        ["data.train_path=0.5 data/a_train_text_document half data/b_train_text_document", "data.path=null"],
        ["data.train_path", "'half' before 'data/b_train_text_document' is not a weight (a number)"],
    ),
    (
        "a blend with a weight of 0",
        TINY,
        ["data.path=0 data/a_text_document 1 data/b_text_document"],
        ["the weight 0 of 'data/a_text_document' is not above 0"],
    ),
    (
        "a length in epochs of a blend",
        TINY,
        ["train.iters=null", "train.epochs=1", "data.path=0.5 data/a_text_document 0.5 data/b_text_document"],
        ["train.epochs counts the training split of one prepared dataset", "is a blend"],
    ),
    (
        "a length passed through extra",
        GPT2,
        ["train.iters=null", 'extra.megatron_args=[--train-samples,"3200"]'],
        ["exactly once", "--train-samples: the recipe key train.samples renders it", "set train.samples"],
    ),
    (
        "a sample-based length with a warm-up in iterations",
        GPT2,
        ["train.iters=null", "train.samples=3200"],
        ["train.lr_warmup_iters=", "refuses a warm-up in iterations", "train.lr_warmup_tokens"],
    ),
    (
        "a warm-up in iterations and in tokens",
        GPT2,
        ["train.lr_warmup_tokens=1000"],
        ["the warm-up is given twice", "train.lr_warmup_tokens and train.lr_warmup_iters"],
    ),
    (
        "a token warm-up as long as the token decay",
        GPT2,
        ["train.lr_warmup_iters=0", "train.lr_warmup_tokens=1000", "train.lr_decay_tokens=1000"],
        ["does not end before the decay does (1000 tokens)"],
    ),
    (
        "a batch ramp-up over a length in iterations",
        GPT2,
        ["train.rampup_batch_size=[8,8,100]"],
        ["train.rampup_batch_size", "sample-based length only"],
    ),
    (
        "a batch ramp-up the increments do not reach the global batch by",
        GPT2,
        [
            "train.iters=null",
            "train.samples=3200",
            "train.lr_warmup_iters=0",
            "train.rampup_batch_size=[12,8,100]",
        ],
        [
            "increment must be at least 1 and divide global batch - start",
            "e.g. train.rampup_batch_size=[8, 8, 100]",
        ],
    ),
    (
        "a batch ramp-up off the micro batch x data parallel",
        GPT2,
        [
            "train.iters=null",
            "train.samples=3200",
            "train.lr_warmup_iters=0",
            "train.rampup_batch_size=[4,4,100]",
        ],
        ["multiple of micro batch x data parallel = 8"],
    ),
    ("warm-up too long", GPT2, ["train.lr_warmup_iters=100"], ["train.lr_warmup_iters", "train.iters"]),
    (
        "warm-up longer than a length in tokens",
        TINY,
        ["train.iters=null", "train.tokens=1"],
        ["warm-up (5 iterations) does not end before training does (train.tokens = 1 iteration(s))"],
    ),
    ("min lr above lr", GPT2, ["train.min_lr=1e-3"], ["train.min_lr", "train.lr"]),
    ("node rank out of range", GPT2, ["hardware.node_rank=1"], ["hardware.node_rank", "between 0 and 0"]),
    (
        "deepspeed multi-node without hostfile",
        GPT2,
        ["hardware.nodes=2", "hardware.launcher=deepspeed"],
        ["hardware.hostfile"],
    ),
    ("torchrun multi-node without master", GPT2, ["hardware.nodes=2"], ["hardware.master_addr"]),
    (
        "hostfile under torchrun",
        GPT2,
        ["hardware.hostfile=hosts"],
        ["hardware.hostfile", "hardware.launcher"],
    ),
    (
        "epochs without the dataset",
        GPT2,
        ["train.iters=null", "train.epochs=1", "data.path=data/none"],
        ["train.epochs", "data/none.idx", "zerolab prep"],
    ),
    (
        "save interval in epochs without the dataset",
        GPT2,
        ["train.save_interval_epochs=1", "data.path=data/none"],
        ["train.save_interval_epochs", "data/none.idx", "train.save_interval (iterations)"],
    ),
    (
        "save interval in epochs and in iterations",
        GPT2,
        ["train.save_interval_epochs=1", "train.save_interval=100"],
        ["train.save_interval", "train.save_interval_epochs", "once"],
    ),
    ("save interval of 0 epochs", GPT2, ["train.save_interval_epochs=0"], ["train.save_interval_epochs"]),
    (
        "save interval in words",
        GPT2,
        ["train.save_interval_epochs=1 epoch"],
        ["train.save_interval_epochs", "valid number"],
    ),
    ("no such recipe", "recipes/gpt2-z1.yaml", [], ["no such recipe", "did you mean `gpt2_z1`"]),
    (
        "recompute method without full",
        TINY,
        ["activation_checkpointing=selective", "activation_checkpointing.method=block"],
        ["activation_checkpointing.method", "full recomputation only"],
    ),
    (
        "recompute layers without recompute",
        TINY,
        ["activation_checkpointing.num_layers=2"],
        ["activation_checkpointing.num_layers", "granularity=full"],
    ),
    (
        "deepspeed checkpointing selective",
        TINY,
        ["activation_checkpointing=selective", "activation_checkpointing.implementation=deepspeed"],
        ["activation_checkpointing.implementation", "uniform chunks only"],
    ),
    (
        "partitioning without deepspeed checkpointing",
        TINY,
        ["activation_checkpointing=full", "activation_checkpointing.partition_activations=true"],
        ["activation_checkpointing.partition_activations", "implementation=deepspeed"],
    ),
    (
        "contiguous without partitioning",
        TINY,
        [
            "activation_checkpointing=full",
            "activation_checkpointing.implementation=deepspeed",
            "activation_checkpointing.contiguous_memory=true",
        ],
        ["activation_checkpointing.contiguous_memory", "partition_activations=true"],
    ),
    (
        "uniform chunk does not divide the stage",
        GPT2,
        ["activation_checkpointing=full", "activation_checkpointing.num_layers=5"],
        ["activation_checkpointing.num_layers", "divisor of model.num_layers / parallel.pipeline"],
    ),
    (
        "block beyond the stage",
        TINY,
        [
            "activation_checkpointing=full",
            "activation_checkpointing.method=block",
            "activation_checkpointing.num_layers=3",
        ],
        ["activation_checkpointing.num_layers", "at most 2"],
    ),
    (
        "block with pipeline",
        "recipes/gpt2_tp2_pp2.yaml",
        ["activation_checkpointing.method=block"],
        ["activation_checkpointing.method", "parallel.pipeline", "recompute nothing"],
    ),
    (
        "weights offload below stage 3",
        GPT2,
        ["zero.offload_param=true"],
        ["zero.offload_param", "zero.stage=3"],
    ),
    (
        "stage-3 knob at stage 1",
        GPT2,
        ["zero.prefetch_bucket_size=50000000"],
        ["zero.prefetch_bucket_size", "stage 3 only"],
    ),
    (
        "wandb name without project",
        TINY,
        ["logging.wandb_name=x"],
        ["logging.wandb_name", "logging.wandb_project"],
    ),
    (
        "extra argument not an option",
        TINY,
        ["extra.megatron_args=[rotary]"],
        ["extra.megatron_args", "start with an option"],
    ),
    (
        "extra argument rendered already",
        TINY,
        ["extra.megatron_args=[--micro-batch-size, '4']"],
        ["extra.megatron_args", "--micro-batch-size", "rendered from the recipe's own keys"],
    ),
    (
        "extra ds_config key rendered already",
        TINY,
        ["extra.ds_config={train_batch_size: 16}"],
        ["extra.ds_config", "train_batch_size", "rendered from the recipe's own keys"],
    ),
    (
        "unknown attention",
        GPT2,
        ["model.attention=xformers"],
        ["model.attention", "'flash', 'flash-v1' or 'flash-triton'"],
    ),
    (
        "flash on CPU",
        TINY,
        ["model.attention=flash"],
        ["model.attention='flash'", "hardware.device='cpu'", "CUDA GPUs only", "model.attention=sdpa"],
    ),
    (
        "flash in fp32",
        GPT2,
        ["model.attention=flash", "precision=fp32"],
        ["model.attention", "precision.bf16", "bf16 or fp16 only", "precision=bf16"],
    ),
    (
        "flash with selective recompute",
        GPT2,
        ["model.attention=flash", "activation_checkpointing=selective"],
        ["activation_checkpointing.granularity", "recompute nothing", "granularity=none"],
    ),
    (
        "attention flag in extra arguments",
        TINY,
        ["extra.megatron_args=[--use-flash-attn-triton]"],
        ["extra.megatron_args", "--use-flash-attn-triton", "chosen by model.attention"],
    ),
    (
        "per-document mask with sdpa",
        TINY,
        ["model.attention=sdpa", "extra.megatron_args=[--reset-attention-mask]"],
        ["model.attention='sdpa'", "--reset-attention-mask", "use model.attention=megatron"],
    ),
    (
        "vocab size not the tokenizer's",
        GPT2,
        ["model.vocab_size=50304"],
        [
            "model.vocab_size=50304",
            "data.tokenizer_type='GPT2BPETokenizer'",
            "data.vocab_file",
            "has 50257 entries",
            "set model.vocab_size=50257",
        ],
    ),
    (
        "vocab size not the tokenizer's, its vocab file missing",
        TINY,
        ["model.vocab_size=1000", "data.vocab_file=nowhere/vocab.json"],
        ["model.vocab_size=1000", "GPT2BPETokenizer has 50257 entries", "set model.vocab_size=50257"],
    ),
    (
        "a rotary option without rotary embeddings",
        TINY,
        ["model.rotary_percent=0.25", "model.rotary_theta=500000"],
        ["rotary_percent, rotary_theta: options of rotary position embeddings", "set model.rotary=true"],
    ),
    (
        "a rotary fraction above the whole head",
        TINY,
        ["model.rotary=true", "model.rotary_percent=1.5"],
        ["`model.rotary_percent` = 1.5", "less than or equal to 1"],
    ),
    (
        "a timer level Megatron has not",
        TINY,
        ["logging.timing_log_level=3"],
        ["`logging.timing_log_level` = 3", "less than or equal to 2"],
    ),
    (
        "an option of the flops profiler with no step to profile",
        TINY,
        ["logging.flops_profiler_top_modules=3"],
        ["flops_profiler_top_modules: an option of the flops profiler", "set logging.flops_profiler_step"],
    ),
    (
        "a partial optimizer offload without ZeRO-3's optimizer offload",
        TINY,
        ["zero.offload_ratio=0.3"],
        ["offload_ratio: the share of an offloaded optimizer", "set zero.stage=3 and zero.offload_optimizer"],
    ),
    (
        "an offload ratio above the whole optimizer",
        "recipes/cpu/tiny_z3_offload.yaml",
        ["zero.offload_ratio=1.5"],
        ["`zero.offload_ratio` = 1.5", "less than or equal to 1"],
    ),
    (
        "FPDT on CPU",
        TINY,
        ["parallel.sequence=2", "parallel.sequence_fpdt=true"],
        ["FPDT's attention", "flash_attn package's kernels", "set parallel.sequence_fpdt=false"],
    ),
    (
        "an FPDT option without FPDT",
        TINY,
        ["parallel.sequence_fpdt_offloading=true"],
        ["sequence_fpdt_offloading: options of FPDT, which is off", "set parallel.sequence_fpdt=true"],
    ),
    (
        "the zero-bubble pipeline the pinned DeepSpeed cannot run",
        TINY,
        ["parallel.pipeline=2", "extra.megatron_args=[--enable-zbh1-pipeline]"],
        ["--enable-zbh1-pipeline: the engine's zero-bubble pipeline", "PipelineEngine.mem_status"],
    ),
    (
        "fp32 gradient accumulation of bf16 without ZeRO",
        "recipes/cpu/tiny_dp.yaml",
        ["precision=bf16", "precision.grad_accum_dtype=fp32"],
        [
            "without ZeRO, DeepSpeed accumulates gradients in the training format (bf16) only",
            "precision.grad_accum_dtype=bf16 (or null)",
        ],
    ),
    (
        "moved checkpointing key",
        TINY,
        ["train.activation_checkpointing=true"],
        ["`train.activation_checkpointing` has moved", "activation_checkpointing=full"],
    ),
]

FILE_CASES = [
    (
        "NUL in a value (it could turn into a shell expansion)",
        'description: "tiny\\0HOME\\0"\nbase: [model/gpt2-tiny]\n',
        ["bad.yaml: `description` contains a NUL character", "remove it"],
    ),
    ("YAML syntax error", "base: [model/gpt2-124m\ntrain: {", ["not valid YAML", "bad.yaml:"]),
    ("not a mapping", "- model/gpt2-124m\n", ["holds a mapping", "not a list"]),
    ("base not a list", "base: model/gpt2-124m\n", ["`base` must be a list"]),
    (
        "unknown building block",
        "base: [model/gpt2-2b]\ntrain: {iters: 10}\n",
        ["model/gpt2-2b", "configs/model/gpt2-2b.yaml"],
    ),
    (
        "unknown top-level key",
        "zero_optimisation: {stage: 2}\ntrain: {iters: 10}\n",
        ["bad.yaml", "`zero_optimisation`"],
    ),
    ("section is a scalar", "train: 10\n", ["bad.yaml", "`train`"]),
    ("string where int", "train: {iters: ten}\n", ["bad.yaml", "`train.iters`", "valid integer"]),
]


@pytest.mark.parametrize(
    ("recipe", "overrides", "expected"), [c[1:] for c in OVERRIDE_CASES], ids=[c[0] for c in OVERRIDE_CASES]
)
def test_bad_overrides_exit_2_naming_the_key(recipe, overrides, expected, repo_root, capsys, monkeypatch):
    monkeypatch.chdir(repo_root)
    assert main(["render", recipe, *overrides, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    for text in expected:
        assert text in captured.err


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_bad_recipe_files_exit_2_naming_file_and_key(text, expected, tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(text)
    out = tmp_path / "out"
    assert main(["render", str(recipe), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    for fragment in expected:
        assert fragment in captured.err
    assert not out.exists()


def test_the_table_is_at_least_thirty_cases():
    assert len(OVERRIDE_CASES) + len(FILE_CASES) >= 30


def test_errors_name_the_file_that_set_the_key(repo_root, capsys, monkeypatch):
    monkeypatch.chdir(repo_root)
    assert main(["render", GPT2, "parallel.pipeline=2", "zero=z3"]) == 2
    err = capsys.readouterr().err
    assert "zero.stage=3 (configs/zero/z3.yaml (override `zero=z3`))" in err
    assert "parallel.pipeline=2 (override `parallel.pipeline=2`)" in err


def test_a_key_nobody_set_is_blamed_on_the_schema_default_not_on_its_sections_override(
    repo_root, capsys, monkeypatch
):
    monkeypatch.chdir(repo_root)
    assert main(["render", TINY, "parallel.tensor=3"]) == 2
    err = capsys.readouterr().err
    assert "parallel.tensor=3 (override `parallel.tensor=3`), parallel.pipeline=1 (schema default)" in err


def test_all_problems_are_reported_at_once(repo_root, capsys, monkeypatch):
    monkeypatch.chdir(repo_root)
    assert main(["render", TINY, "precision=fp16", "train.min_lr=1", "model.seq_length=4096"]) == 2
    err = capsys.readouterr().err
    assert "3 problem(s)" in err


def test_launch_refuses_missing_data_before_anything_starts(repo_root, capsys, tmp_path):
    run_dir = tmp_path / "run"
    missing = tmp_path / "nowhere" / "dolly_text_document"
    assert main(["launch", TINY, f"data.path={missing}", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"data.path: {missing}.bin and {missing}.idx not found" in err
    assert (
        f"zerolab prep CORPUS --out {tmp_path / 'nowhere' / 'dolly'}`" in err
    )  # the user's path, not data/dolly
    assert "prep dolly --out data/dolly" not in err
    assert not run_dir.exists()


def test_launch_refuses_a_port_another_run_listens_on_with_the_key_to_change(tmp_path, capsys):
    run_dir = tmp_path / "run"
    with socket.socket() as other_run:
        other_run.bind(("127.0.0.1", 0))
        other_run.listen()
        port = other_run.getsockname()[1]
        assert main(["launch", TINY, f"hardware.master_port={port}", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"hardware.master_port {port} is in use on this machine" in err
    assert f"e.g. hardware.master_port={port + 1}" in err and not run_dir.exists()


def test_an_unquoted_number_among_megatron_args_is_explained(capsys):
    assert main(["render", TINY, "extra.megatron_args=[--rotary-percent, 0.5]"]) == 2
    err = capsys.readouterr().err
    assert "`extra.megatron_args.1` = 0.5: YAML read this token as a float" in err and "quote it" in err


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_an_empty_recipe_is_called_empty(tmp_path, capsys, text):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(text)
    assert main(["render", str(recipe)]) == 2
    assert f"{recipe} is empty: a recipe lists its building blocks under `base:`" in capsys.readouterr().err


def test_show_prints_a_recipe_that_fails_its_checks_then_the_problems(repo_root, monkeypatch, capsys):
    monkeypatch.chdir(repo_root)
    assert main(["show", TINY, "parallel.tensor=3"]) == 2
    captured = capsys.readouterr()
    assert "not computed, the recipe fails its checks" in captured.out
    assert "parallel:\n  tensor: 3\n  pipeline: 1\n" in captured.out
    assert "2 problem(s) found before launch" in captured.err


# (id, recipe text, the line PyYAML's marks point at, fragments the message must contain)
YAML_SYNTAX_ERRORS = [
    ("bracket left open on the last line", "train:\n  iters: 10\n  lr: [1, 2\n", 3, ["`[`", "never closed"]),
    ("bracket left open, no final newline", "base: [model/gpt2-124m", 1, ["`[`", "never closed"]),
    ("quote left open", 'description: "oops\ntrain: {iters: 10}\n', 1, ['`"`', "never closed"]),
    ("quote left open on the last line", "train: {iters: 10}\ndescription: 'oops\n", 2, ["`'`"]),
    ("brace left open, more keys after it", "train: {iters: 10\nmodel: {name: x}\n", 2, ["`{` at line 1"]),
    ("a key indented too little", "train:\n  iters: 10\n bad: 1\n", 3, ["column 2"]),
    ("a tab as indentation", "train:\n\titers: 10\n", 2, ["'\\t'"]),
    ("a colon in a plain value", "description: a: b\n", 1, ["mapping values are not allowed"]),
    ("an undefined alias", "train: *x\n", 1, ["undefined alias"]),
    ("a control character", "description: a\ntrain: \x00\n", 2, ["#x0000"]),
]


@pytest.mark.parametrize(
    ("text", "line", "fragments"),
    [c[1:] for c in YAML_SYNTAX_ERRORS],
    ids=[c[0] for c in YAML_SYNTAX_ERRORS],
)
def test_yaml_syntax_errors_name_the_line_pyyaml_means(text, line, fragments, tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(text)
    assert main(["render", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert f"{recipe}:{line}: not valid YAML" in err
    assert 1 <= line <= len(text.splitlines())
    for fragment in fragments:
        assert fragment in err
    assert "Traceback" not in err


def test_an_override_yaml_error_has_no_line_number(capsys):
    assert main(["render", GPT2, "train.lr=[1"]) == 2
    err = capsys.readouterr().err
    assert "override `train.lr=[1`: not valid YAML: the `[` at column 1 is never closed" in err


# (id, recipe text, the key named, its two lines)
DUPLICATE_KEYS = [
    ("a section twice", "train: {iters: 10}\nmodel: {name: x}\ntrain: {lr: 0.1}\n", "train", (1, 3)),
    ("a key twice", "train:\n  iters: 10\n  lr: 0.1\n  iters: 20\n", "train.iters", (2, 4)),
    ("a key twice in a flow mapping", "extra:\n  ds_config: {a: 1, a: 2}\n", "extra.ds_config.a", (2, 2)),
    ("base twice", "base: [model/gpt2-124m]\nbase: [model/gpt2-tiny]\n", "base", (1, 2)),
]


@pytest.mark.parametrize(
    ("text", "key", "lines"), [c[1:] for c in DUPLICATE_KEYS], ids=[c[0] for c in DUPLICATE_KEYS]
)
def test_a_key_given_twice_is_refused_naming_both_lines(text, key, lines, tmp_path, capsys):
    recipe = tmp_path / "twice.yaml"
    recipe.write_text(text)
    out = tmp_path / "out"
    assert main(["render", str(recipe), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{recipe}:{lines[1]}: `{key}` is given twice (lines {lines[0]} and {lines[1]})" in err
    assert "keep one" in err
    assert not out.exists()


def test_a_building_block_with_a_key_twice_is_refused(tmp_path):

    block = tmp_path / "block.yaml"
    block.write_text("# a block\nmodel:\n  num_layers: 2\n  hidden_size: 64\n  num_layers: 4\n")
    with pytest.raises(UserError, match=r"block.yaml:5: `model.num_layers` is given twice \(lines 3 and 5\)"):
        read_yaml_mapping(block)


def test_an_override_with_a_key_twice_is_refused(capsys):
    assert main(["render", TINY, "extra.ds_config={a: 1, a: 2}"]) == 2
    err = capsys.readouterr().err
    assert "override `extra.ds_config={a: 1, a: 2}`: `a` is given twice" in err


def test_a_recipe_that_is_not_utf8_is_refused_with_the_offset_and_line(tmp_path, capsys):
    recipe = tmp_path / "latin1.yaml"
    recipe.write_bytes("description: tiny\ntrain: {iters: 10}\n# café\n".encode("latin-1"))
    assert main(["render", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert f"{recipe}: not UTF-8: byte 0xe9 at offset 42 (line 3, column 6)" in err
    assert "save it as UTF-8" in err
    assert "Traceback" not in err


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path, capsys):
    recipe = tmp_path / "loop.yaml"
    recipe.write_text("train: {iters: 10}\nextra:\n  megatron_args: &args [--x, *args]\n")
    assert main(["render", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert f"{recipe}:3: `extra.megatron_args.1` contains itself" in err
    assert "remove the alias" in err


def test_the_vocab_size_is_read_from_the_configured_vocab_file(tmp_path, capsys):
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({"a": 0, "b": 1, "<|endoftext|>": 2}))
    assert main(["render", TINY, f"data.vocab_file={vocab}", "--json"]) == 2
    err = capsys.readouterr().err
    assert (
        f"model.vocab_size 50257 is not the size of the tokenizer's vocabulary: {vocab} has 3 entries" in err
    )
    assert "set model.vocab_size=3" in err
    assert main(["render", TINY, f"data.vocab_file={vocab}", "model.vocab_size=3", "--json"]) == 0
    vocab.write_text("[1, 2")
    assert main(["render", TINY, f"data.vocab_file={vocab}", "--json"]) == 2
    err = capsys.readouterr().err
    assert f"{vocab} is not a vocab.json (a JSON object of token: id)" in err


def test_warm_up_longer_than_a_length_in_epochs_is_refused(dataset, capsys):
    epochs = ["train.iters=null", "train.epochs=0.001", "train.lr_warmup_iters=50", f"data.path={dataset}"]
    assert main(["render", TINY, *epochs, "--json"]) == 2
    assert "(train.epochs = 1 iteration(s))" in capsys.readouterr().err


def test_launch_refuses_a_missing_hostfile_before_anything_is_written(repo_root, capsys, tmp_path, dataset):
    run_dir = tmp_path / "run"
    nodes = ["hardware.nodes=2", "hardware.launcher=deepspeed", f"hardware.hostfile={tmp_path / 'hosts'}"]
    words = [TINY, f"data.path={dataset}", *nodes, "train.global_batch_size=16"]
    assert main(["launch", *words, "--run-dir", str(run_dir)]) == 2
    assert f"hardware.hostfile: {tmp_path / 'hosts'} not found" in capsys.readouterr().err
    assert not run_dir.exists()
    assert main(["render", *words, "--json"]) == 0
    assert f"zerolab: warning: hardware.hostfile: {tmp_path / 'hosts'} not found" in capsys.readouterr().err


DEEPSPEED_STYLE = """\
base: [model/gpt2-tiny, data/dolly-sample, precision/bf16, hardware/cpu-2ranks, train/tiny-demo,
       zero/z3_offload]
precision:
  bf16: {enabled: true}
zero:
  offload_optimizer: {device: cpu}
"""


def test_a_deepspeed_style_mapping_is_blamed_on_the_users_file_with_the_value_to_write(tmp_path, capsys):
    # the blocks set both keys to true; the user's mappings replace them: the user's file is at fault
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(DEEPSPEED_STYLE)
    out = tmp_path / "out"
    assert main(["render", str(recipe), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    assert "configs/" not in captured.err
    assert (
        f"{recipe}: `precision.bf16` = {{'enabled': True}}: Input should be a valid boolean" in captured.err
    )
    assert "write `precision.bf16: true`" in captured.err
    assert f"{recipe}: `zero.offload_optimizer` = {{'device': 'cpu'}}" in captured.err
    assert "write `zero.offload_optimizer: true`" in captured.err


@pytest.mark.parametrize("override", ["precision.bf16={enabled: true}", "precision.bf16.enabled=true"])
def test_a_deepspeed_style_override_is_blamed_on_the_override(override, repo_root, capsys, monkeypatch):
    monkeypatch.chdir(repo_root)
    assert main(["render", TINY, override, "--json"]) == 2
    err = capsys.readouterr().err
    assert f"override `{override}`: `precision.bf16` = {{'enabled': True}}" in err, err
    assert "configs/precision" not in err and "write `precision.bf16=true`" in err


def test_a_value_replaced_by_a_later_source_is_that_sources(tmp_path, capsys):
    # a section given as one value replaces the block's mapping: the file that gave it is named
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("base: [model/gpt2-tiny, precision/bf16]\nprecision: bf16\n")
    assert main(["render", str(recipe), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"zerolab: error: {recipe}: `precision` = 'bf16'"), err


def test_every_block_and_override_that_cannot_be_merged_is_named_at_once(repo_root, capsys, monkeypatch):
    monkeypatch.chdir(repo_root)
    assert main(["render", TINY, "model=gpt2-2b", "train.iters=[1", "zero=z9", "--json"]) == 2
    err = capsys.readouterr().err
    assert "override `model=gpt2-2b`: no building block `model/gpt2-2b`" in err
    assert "override `train.iters=[1`: not valid YAML" in err
    assert "override `zero=z9`: no building block `zero/z9`" in err


def test_a_launch_names_every_problem_at_once(repo_root, capsys, tmp_path, dataset, monkeypatch):
    # no GPU here and the hostfile missing: both are named, in one refusal, and nothing is written
    monkeypatch.setattr("zerolab.backends.local.query_gpus", list)
    run_dir = tmp_path / "run"
    hosts = tmp_path / "hosts"
    words = [TINY, f"data.path={dataset}", "hardware.device=cuda", "hardware.launcher=deepspeed"]
    assert main(["launch", *words, f"hardware.hostfile={hosts}", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "2 problem(s) found before launch" in err
    assert "nvidia-smi sees no GPU on this machine" in err and f"hardware.hostfile: {hosts} not found" in err
    # a recipe's own problem and a missing input, together too
    missing = tmp_path / "nowhere" / "dolly_text_document"
    assert main(["launch", TINY, "parallel.tensor=3", f"data.path={missing}", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zerolab: error: recipes/cpu/tiny_z1.yaml: 3 problem(s) found before launch")
    assert "is not divisible by tensor x pipeline = 3" in err and f"data.path: {missing}.bin" in err
    assert not run_dir.exists()


def test_a_directory_given_as_a_recipe_lists_the_recipes_in_it(repo_root, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(repo_root)
    for given in ("recipes/cpu", "cpu"):
        assert main(["render", given]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and "no such recipe file" not in captured.err
        assert (
            f"{given}: a directory, not a recipe file; name a recipe in it, e.g. `cpu/tiny_dp`"
            in captured.err
        )
        assert "cpu/tiny_z3_offload_param" in captured.err and "gpt2_z1" not in captured.err
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    assert main(["render", str(mine)]) == 2
    assert "a directory, not a recipe file, and it holds no recipe" in capsys.readouterr().err
    (mine / "sub" / "a.yaml").write_text((repo_root / TINY).read_text())
    assert main(["render", str(mine)]) == 2
    assert f"e.g. `{mine / 'sub' / 'a.yaml'}`" in capsys.readouterr().err


def test_render_out_under_a_file_is_refused_before_anything_is_printed(repo_root, capsys, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    for out in (a_file / "sub", a_file / "sub" / "deeper"):
        assert main(["render", TINY, "--out", str(out)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert f"--out {out}: {a_file} is a file, not a directory" in captured.err
    assert a_file.read_text() == "mine\n"
