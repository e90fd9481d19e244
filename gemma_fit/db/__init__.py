"""Stage 1, the packaged databases: bounded YAML reading, line numbers for errors, validated snapshots,
llama.cpp rule tables.
"""
