"""gemma-fit: will a Gemma model run on this hardware under llama.cpp, and how well."""

__version__ = "0.1.0"

# The llama.cpp source whose rules this package follows (vendored in llama-cpp-python 0.3.36).
LLAMA_CPP_COMMIT = "0c1e570"
