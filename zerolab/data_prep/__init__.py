"""Corpora (dolly-15k, OpenWebText, any JSONL or text) into Megatron's indexed dataset:
`PREFIX_text_document.bin` + `.idx` (MMIDIDX v1), GPT-2 BPE, one end-of-document token
after each document, plus `PREFIX_text_document.manifest.json`."""
