"""Stage 0, the foundation: errors and exit codes, units, text escaping, the user-file writer, the
cache folder, the version.
"""
