"""Cross-framework checks: the same weights loaded everywhere, compared forward and after a step."""
