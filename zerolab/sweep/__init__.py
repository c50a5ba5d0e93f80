"""`zerolab sweep`: a recipe run once per combination of swept values, each cell into its own run
directory under logs/sweeps/NAME/, resumable, summarized with the swept keys as columns
(docs/sweep.md)."""
