"""Stage 3, the file: ggml types, llama-quantize's rules, the tensor inventory (TensorPlan), GGUF
layout, reader and writer.
"""
