"""The dtype vLLM loads a model's unquantized weights in, as its own dtype resolution decides."""

from __future__ import annotations

from gemma_fit.base.errors import BadInput
from gemma_fit.hardware.spec import GPUSpec

# vLLM refuses float16 for Gemma 2 and 3 ("The model type 'gemma3' does not support float16"): vllm/config/model.py
# _FLOAT16_NOT_SUPPORTED_MODELS = {"gemma2", "gemma3", "gemma3_text", "glm4"} since 0.9.1 (PR #18751), still in
# 0.33.0. On a GPU without bfloat16 (compute capability under 8.0: T4, V100), --dtype auto then falls back to
# float32 for them ("Falling back to torch.float32"), and to float16 for Gemma 3n and 4 (not on that list).
NO_FLOAT16_ARCHS = ("gemma2", "gemma3")


def model_dtype(arch: str, quant: str, devices: tuple[GPUSpec, ...], fallback: str = "fp32") -> str:
    """The dtype vLLM loads unquantized weights in: bf16 where every GPU has it, else fp16, or `fallback` (the
    release's: fp32 from 0.9.1, fp16 before) for the architectures that refuse fp16. Quantized formats keep theirs."""
    if quant == "fp16" and arch in NO_FLOAT16_ARCHS and fallback == "fp32":
        raise BadInput(f"--quant fp16 on --engine vllm: vLLM refuses float16 for {arch} (numerically unstable; "
                       "vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS); use bf16 on a GPU that has it")
    if quant != "bf16" or all(d.bf16_supported for d in devices):
        return quant
    return fallback if arch in NO_FLOAT16_ARCHS else "fp16"
