"""Stage 5, memory: RunSettings, KV cache, compute buffer, placement, the estimate, the searches over
it, the verdict.
"""
