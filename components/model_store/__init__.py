"""GgufModelStore: the model volume, its fetch Job and node preflight."""
