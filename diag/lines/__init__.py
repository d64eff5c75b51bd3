"""The line declarations: the spec language (:mod:`diag.lines.spec`) and the periodic lines
declared in it (:mod:`diag.lines.periodic`). A leaf: the event schema derives its periodic
kinds' columns from the declarations, the per-line parsers, RE2 and the C scanner their
matchers, so a field is declared once."""
