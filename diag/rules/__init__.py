"""Rules: one module per finding code (registry.py), typed run metrics, remediation data, evidence selectors."""
