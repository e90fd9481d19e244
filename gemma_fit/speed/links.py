"""The links a token's data crosses: GPU to host (PCIe) and GPU to GPU (PCIe or NVLink).

Bandwidths are decimal GB/s per direction from hardware_db/interconnects.yaml. Each transfer also
pays a fixed latency (copy launch, stream synchronisation), calibrated on published multi-GPU
llama-bench runs (model_db/llamacpp/speed_calibration.yaml `links`, benchmarks/calibrate_speed.py).
"""

from __future__ import annotations

from functools import cache

from gemma_fit.base.record import record
from gemma_fit.hardware.snapshot import known_hardware
from gemma_fit.hardware.spec import GPUAttachment, GPUSpec, PcieRate
from gemma_fit.speed.calibration import split_terms

# PCIe 4.0 x16 per direction after encoding, when a GPU entry names no host link.
DEFAULT_PCIE = (4, 16)


@record
class Link:
    name: str
    per_direction_gbps: float
    latency_s: float  # fixed cost of one transfer, synchronisation included
    nvlink: bool = False  # GPU to GPU over NVLink (peer memory): where vLLM runs its own all-reduce kernel

    def seconds(self, n_bytes: float) -> float:
        return self.latency_s + n_bytes / (self.per_direction_gbps * 1e9)


def default_attachment(gpu: GPUSpec) -> GPUAttachment:
    """How a GPU named on the command line is attached: its own host link; NVLink for SXM modules."""
    gen, lanes = gpu.pcie_gen or DEFAULT_PCIE[0], gpu.pcie_lanes or DEFAULT_PCIE[1]
    link = _pcie(gen, lanes)
    return GPUAttachment(gen, lanes, link.per_direction_gbps if link else None, gpu.nvlink_sxm)


def _pcie(generation: int, lanes: int) -> PcieRate | None:
    """hardware_db/interconnects.yaml's entry for a PCIe generation and width, if it has one."""
    return known_hardware().pcie.get(f"pcie-{generation}-x{lanes}")


@cache
def _pcie_achieved_fraction() -> float:
    """Copies reach this fraction of a PCIe link's theoretical rate: the median over the links with a
    cited measurement in hardware_db/interconnects.yaml (Gen3-Gen5 x16: 0.77-0.84)."""
    ratios = sorted(e.measured_gbps / e.per_direction_gbps for e in known_hardware().pcie.values() if e.measured_gbps)
    return ratios[len(ratios) // 2] if ratios else 1.0


def host_link(attachment: GPUAttachment) -> Link:
    """A GPU's PCIe link at the rate copies reach (measured where the database has it)."""
    gen = attachment.pcie_gen or DEFAULT_PCIE[0]
    lanes = attachment.pcie_lanes or DEFAULT_PCIE[1]
    entry = _pcie(gen, lanes)
    if entry is not None and entry.measured_gbps:
        gbps = entry.measured_gbps
    else:
        theoretical = entry.per_direction_gbps if entry else attachment.host_link_gbps or 31.5
        gbps = theoretical * _pcie_achieved_fraction()
    return Link(f"PCIe {gen}.0 x{lanes}", gbps, split_terms()["pcie_latency_s"])


def peer_link(gpus: tuple[GPUSpec, ...], attachments: tuple[GPUAttachment, ...]) -> Link | None:
    """The slowest GPU-to-GPU link: NVLink when every GPU has it, else PCIe at the narrowest slot."""
    if len(gpus) < 2:
        return None
    if all(a.nvlink for a in attachments) and all(g.nvlink_gbps for g in gpus):
        gbps = min(g.nvlink_gbps or 0.0 for g in gpus) / 2  # entries give total bidirectional
        return Link(f"NVLink ({gbps:g} GB/s per direction)", gbps, split_terms()["nvlink_latency_s"], nvlink=True)
    return min((host_link(a) for a in attachments), key=lambda link: link.per_direction_gbps)
