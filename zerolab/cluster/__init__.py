"""Running recipes on clusters: SLURM batch scripts."""
