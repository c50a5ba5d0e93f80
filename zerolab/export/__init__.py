"""A run's checkpoint as a Hugging Face GPT-2 directory (`zerolab export`)."""
