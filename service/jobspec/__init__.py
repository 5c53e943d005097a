"""The JobSpec front door: YAML walk, validation, overrides, paths, the verl command. Pure."""
