"""The one pre-launch step: recipe words into a checked, rendered, estimated launch plan, which
every command then prints or hands to its backend (zerolab.backends)."""
