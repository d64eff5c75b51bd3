"""Renderers: the report as text, JSON, YAML, Markdown and HTML."""
