"""Fine-tuning a Hugging Face GPT-2 on GLUE, the host's side: a task by name (glue), the GLUE files
`zerolab prep glue` writes (prep, split_files), the request a render writes (request) and the records
a summary reads (records). The loop every rank runs is zerolab.rank.finetune_loop."""
