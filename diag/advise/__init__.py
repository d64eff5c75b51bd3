"""Advice derived from diagnosed facts (e.g. a bucket set sized to the observed decode batches).

Kept import-light (stdlib + numpy) so the advisors can be used without the parsing stack.
"""
