"""Porting a user's existing Megatron-DeepSpeed launch to a recipe: the launch captured from its
script (capture), read into a recipe over the shipped blocks (from_command), and proven by
rendering it back (zerolab from-command)."""
