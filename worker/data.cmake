# Data loading: filled in by its engineer.
