"""Fine-tuning a Hugging Face GPT-2 on GLUE with DeepSpeed's engine: the tasks as the field defines
them (glue), their official metrics (metrics) and the training loop every rank runs (loop)."""
