"""Renderers: the report as text, JSON, YAML, Markdown and HTML (html, html_page, html_run),
its plots (plots, memory_plots: they only read tables computed before them), and compare."""
