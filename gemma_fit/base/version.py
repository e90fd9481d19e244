"""The package's version and the llama.cpp source whose rules it follows: one place for each."""

__version__ = "0.1.0"

# The llama.cpp tree vendored in llama-cpp-python 0.3.36 (base.cache builds the same one).
LLAMA_CPP_COMMIT = "0c1e570"
LLAMA_CPP_DATE = "Oct 2026"
LLAMA_CPP_LABEL = f"{LLAMA_CPP_COMMIT} ({LLAMA_CPP_DATE})"
