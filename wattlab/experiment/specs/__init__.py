"""What a sweep measures: the base every spec shares, the trainer's spec (a base configuration
and a grid), a command's spec, and the shipped presets."""
