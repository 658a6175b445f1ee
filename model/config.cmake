# Typed config: filled in by its engineer.
