"""The command line: a thin typer front-end over the jobs and the presenters (each option declared once
in options.py).
"""
