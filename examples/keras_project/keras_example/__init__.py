"""A small Keras project trained by the runbook: its own package, its own JSON config."""
