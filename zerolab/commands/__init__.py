"""The `zerolab` sub-commands, one module each, the top layer: each registers its parser with
`register(subparsers)` and sets `run` to a function of the parsed args that calls the package
below (recipe, launch, sweep, engine, data_prep, summarize, estimate); zerolab.cli collects them."""
