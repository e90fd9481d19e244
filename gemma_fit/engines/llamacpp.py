"""`gemma-fit check`: one model, quant, settings and hardware in; the contract's JSON document out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gemma_fit.gguf.layout import estimated_file_bytes
from gemma_fit.gguf.tensors import TensorPlan, build_plan
from gemma_fit.hardware.select import Hardware
from gemma_fit.memory.compute_buffer import flash_attention_on
from gemma_fit.memory.estimate import DeviceMemory, HostMemory, runtime_overhead
from gemma_fit.memory.fit import Verdict, decide, with_parallel_outputs
from gemma_fit.memory.settings import RunSettings, validate
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.speed.predict import Performance, SpeedInputError, predict_performance

SCHEMA = "gemma-fit.check/1"


@dataclass(frozen=True)
class CheckResult:
    resolved: ResolvedModel
    plan: TensorPlan
    hardware: Hardware
    settings: RunSettings
    verdict: Verdict
    file_size_bytes: int
    performance: Performance | None
    speed_error: str | None

    def assumptions(self) -> list[str]:
        out = [
            f"llama.cpp rules as of commit 0c1e570 (Oct 2026); compute buffer sized for llama-server "
            f"(logits for {self.settings.n_outputs_max} output(s) per ubatch)",
            "weights are memory-mapped: host weights count the mapped span of the file",
        ]
        for backend in sorted({g.backend for g in self.hardware.gpus}):
            o = runtime_overhead(backend)
            kind = "measured" if o.measured else "a budget, not yet measured"
            out.append(f"{backend} runtime overhead {o.bytes / 2**20:.0f} MiB per device ({kind})")
        out.extend(self.hardware.notes)
        return out


def run_check(resolved: ResolvedModel, quant: str, settings: RunSettings, hardware: Hardware,
              prompt_tokens: int = 512, with_speed: bool = True, plan: TensorPlan | None = None,
              gguf_path: Path | str | None = None) -> CheckResult:
    """`plan` replaces the database plan when the tensors come from a real GGUF header; `gguf_path` is
    that file as the user gave it (the llama-server command then runs it, not a made-up file name)."""
    s = with_parallel_outputs(validate(settings, resolved.spec))
    plan = plan or build_plan(resolved.spec, quant)
    verdict = decide(plan, s, hardware.devices, hardware.host_capacity_bytes,
                     gguf_name=str(gguf_path) if gguf_path is not None else None)
    perf, speed_error = None, None
    if with_speed and verdict.verdict != "no-go":
        machine = hardware.machine
        try:
            perf = predict_performance(
                plan, verdict.estimate, hardware.gpus, prompt_tokens,
                ram_bandwidth_gbps=machine.ram_bandwidth_gbps if machine else None,
                disk_read_gbps=_disk_read_gbps(hardware),
                cpu_cores=_local_cores() if not hardware.gpus and machine is None else None,
                attachments=machine.attachments if machine else None,
                ram_bytes=(machine.ram_bytes if machine else None) or hardware.host_capacity_bytes,
            )
        except SpeedInputError as exc:
            speed_error = str(exc)
    return CheckResult(resolved, plan, hardware, s, verdict, estimated_file_bytes(plan), perf, speed_error)


def _disk_read_gbps(hardware: Hardware) -> float | None:
    disk = hardware.machine.disk if hardware.machine else hardware.disk
    return disk.sequential_read_gbps if disk else None


def _local_cores() -> int | None:
    import psutil

    return psutil.cpu_count(logical=True)


def _rounded(value: float | None, digits: int, scale: float = 1.0) -> float | None:
    return None if value is None else round(value * scale, digits)


def _performance_json(r: CheckResult) -> dict[str, Any] | None:
    p = r.performance
    if p is None:
        return None
    return {"decode_tokens_per_s": round(p.decode_tokens_per_s, 2),
            "prefill_tokens_per_s": round(p.prefill_tokens_per_s, 1),
            "ttft_s": round(p.ttft_s, 3), "load_s": round(p.load_s, 2),
            "bottleneck": p.bottleneck,
            "prompt_tokens": p.prompt_tokens,
            "decode_time_by_device_s": {k: round(v, 6) for k, v in p.decode_time_by_device_s.items()},
            "load_warm_s": _rounded(p.load_warm_s, 2),
            "per_offloaded_layer_ms": _rounded(p.per_offloaded_layer_s, 3, scale=1e3),
            "interconnect": p.interconnect,
            "load_bottleneck": p.load_bottleneck,
            "split_modes_decode_tokens_per_s": {k: round(v, 2)
                                                for k, v in (p.split_modes_decode_tokens_per_s or {}).items()},
            "notes": list(p.notes)}


def _device_json(d: DeviceMemory) -> dict[str, Any]:
    return {"id": d.id, "name": d.name, "weights_bytes": d.weights_bytes, "kv_cache_bytes": d.kv_cache_bytes,
            "compute_bytes": d.compute_bytes, "overhead_bytes": d.overhead_bytes, "mmproj_bytes": d.mmproj_bytes,
            "total_bytes": d.total_bytes, "capacity_bytes": d.capacity_bytes, "headroom_bytes": d.headroom_bytes}


def _host_json(h: HostMemory) -> dict[str, Any]:
    return {"weights_bytes": h.weights_bytes, "kv_cache_bytes": h.kv_cache_bytes, "compute_bytes": h.compute_bytes,
            "output_bytes": h.output_bytes, "total_bytes": h.total_bytes, "capacity_bytes": h.capacity_bytes}


def check_json(r: CheckResult) -> dict[str, Any]:
    spec, s, v = r.resolved.spec, r.settings, r.verdict
    est = v.estimate
    return {
        "schema": SCHEMA,
        "model": {"id": spec.id, "quant": r.plan.ftype.name, "arch": spec.arch, "n_params": r.plan.n_params,
                  "file_size_bytes": r.file_size_bytes, "resolved": r.resolved.how,
                  "n_ctx_train": spec.n_ctx_train, "tensor_types": r.plan.type_counts()},
        "hardware": {"name": r.hardware.label, "gpus": [g.id for g in r.hardware.gpus]},
        "settings": {"n_ctx": est.n_ctx, "n_ubatch": s.ubatch, "n_batch": s.n_batch, "n_parallel": s.n_parallel,
                     "flash_attn": "on" if flash_attention_on(s) else "off", "cache_type_k": s.cache_type_k,
                     "cache_type_v": s.cache_type_v, "n_gpu_layers": v.n_gpu_layers,
                     "n_layers_total": spec.n_layer + 1, "swa_full": s.swa_full, "kv_unified": s.kv_unified,
                     "kv_cells": est.kv.base_cells, "kv_cells_swa": est.kv.swa_cells},
        "memory": {"devices": [_device_json(d) for d in est.devices], "host": _host_json(est.host)},
        "verdict": v.verdict,
        "reasons": list(v.reasons),
        "max_ctx_fit": v.max_ctx_fit,
        "max_ctx_fit_limit": v.max_ctx_fit_limit,  # "n_ctx_train": the trained context stops it, not memory
        "unchecked": list(v.unchecked),  # capacities not checked because unknown ("host_ram")
        "suggestion": v.suggestion,
        "performance": _performance_json(r),
        "speed_error": r.speed_error,
        "llama_server_command": v.server_command,
        "assumptions": r.assumptions(),
    }
