"""Training logs into per-run and cross-run tables and plots (`zerolab summarize`,
`zerolab compare`, `tools/summarize`). See docs/summarize.md."""
