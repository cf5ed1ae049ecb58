"""Facts about the models, no framework needed: dimensions, FLOPs, the neutral weight layout,
pipeline cut points."""
