"""Rules: the rule engine, its condition language, metrics and evidence selectors."""
