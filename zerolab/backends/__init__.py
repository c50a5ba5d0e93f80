"""Launch backends: who starts a planned launch (zerolab.launch.plan) and follows it to its end.
Each backend is one module implementing `base.Backend`, named in `registry.BACKENDS` and chosen
by the recipe's hardware.backend (docs/backends.md)."""
