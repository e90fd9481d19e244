"""Stage 8, presenters: the contract's JSON documents, the terminal tables (rich) and the HTML reports (jinja2)."""
