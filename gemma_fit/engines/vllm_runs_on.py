"""What vLLM runs on at all, before any memory is counted: the GPUs of its platforms, NVIDIA ones from the compute
capability its wheels carry kernels for (by release, model_db/engines/versions.yaml)."""

from __future__ import annotations

from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.hardware.spec import GPUSpec

# vllm/platforms/__init__.py: the CUDA, ROCm and XPU platforms (and TPU, CPU), not Apple's Metal nor Vulkan
VLLM_BACKENDS = ("cuda", "rocm", "sycl")


def check_devices(devices: tuple[GPUSpec, ...], release: str, defaults: dict[str, Any]) -> None:
    """GPUs of a backend vLLM has; NVIDIA ones from the compute capability its wheels carry kernels for (versions.yaml,
    by release)."""
    if not devices:
        raise BadInput("--engine vllm needs a GPU (vLLM's CPU backend is not modelled); use --engine llama.cpp")
    other = [d for d in devices if d.backend not in VLLM_BACKENDS]
    if other:
        hint = "--backend sycl (Intel's XPU), or " if other[0].vendor == "intel" else ""
        raise BadInput(f"--engine vllm runs on CUDA, ROCm and Intel XPU GPUs; {other[0].name} is a {other[0].backend} "
                       f"device here ({hint}--engine llama.cpp or ollama)")
    floor = float(defaults["min_compute_capability"])
    old = [d for d in devices if (d.cuda_capability or floor) < floor]
    if old:
        raise BadInput(f"{release} needs an NVIDIA GPU of compute capability {floor:.1f} or higher; {old[0].name} has "
                       f"{old[0].compute_capability} (--engine llama.cpp or ollama run there)")

