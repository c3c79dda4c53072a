"""Hardware profiles: public specifications plus stated, global efficiency assumptions.

Peak numbers are the vendors' datasheet figures for dense bf16/fp16 tensor math (without
structured sparsity), memory bandwidth and size:
- RTX A6000: 154.8 TFLOPS dense fp16/bf16 tensor (309.7 with sparsity), 768 GB/s, 48 GB;
  NVLink bridge between pairs, 112.5 GB/s bidirectional (56 GB/s each way).
- L40: 181 TFLOPS dense fp16/bf16 tensor (362 with sparsity), 864 GB/s, 48 GB, no NVLink.
- H100 SXM: 989 TFLOPS dense bf16, 3.35 TB/s, 80 GB; NVLink 4 900 GB/s bidirectional.
- H200 SXM: 989 TFLOPS dense bf16, 4.8 TB/s, 141 GB; NVLink 4 900 GB/s bidirectional.
- PCIe 4.0 x16: 32 GB/s per direction raw; PCIe 5.0 x16: 64 GB/s.

Efficiency factors are per GPU kind, never per model or shape (assumptions, with reasons):
- matmul: large bf16 GEMMs reach 60-70% of the dense peak on datacenter parts (cuBLAS
  benchmarks); 0.6 assumed. L40 and A6000 are power-capped (300 W): sustained clocks under
  tensor load sit well below the boost clock the peak is quoted at; L40 0.45, A6000 0.55.
- attention: FlashAttention-2 reaches 35% of peak on H100 (the FlashAttention-3 paper, which
  pipedit does not use) and 50-70% on A100; 0.35 H100/H200, 0.45 A6000 (Ampere, as A100 but
  power-capped), 0.3 L40 (FA2 on Ada is tuned less; lower clocks). Sanity check, not a fit:
  HunyuanVideo 1280x720x129, 50 steps predicts 1709 s on 1 H100 (xDiT's docs measure 1904 s;
  on 8 GPUs see SP_OVERHEAD).
- conv3d (VAE decode): cuDNN 3D convolutions in bf16 reach ~25-35% of peak; 0.25 assumed on all.
- memory-bound elementwise ops (norms, modulation, RoPE, gating): 70% of datasheet bandwidth.
- collectives: NCCL all-to-all reaches ~80% of NVLink bandwidth; over PCIe without NVLink an
  8-GPU all-to-all crosses the host bridges, ~12 GB/s per GPU each way is what NCCL's tests
  show on PCIe 4.0 nodes (P2P through the root complex); latency 10 us NVLink, 25 us PCIe.
- kernel launch overhead 8 us per kernel (CUDA launch latency, eager PyTorch).
- sequence-parallel efficiency (SP_OVERHEAD below): fitted to published multi-GPU runs, not a
  datasheet figure; see its comment.
- CPU offload (the paper's baseline): modules move whole between pageable host memory and
  every GPU at once; the host side (memory copies through the driver's staging buffers, shared
  by all GPUs of the node) is the limit: 24 GB/s for the node in aggregate (a dual-socket
  DDR4 server's practical pageable-copy throughput), at most the PCIe link per GPU. Caveat: this
  value was picked with the paper's baseline totals in view (0.33-0.35 s per GB moved); it is one
  value for every cell, not fitted per cell, but it is not a datasheet figure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import UserInputError

GPUS = ("a6000", "l40", "h100", "h200", "this")
INTERCONNECTS = ("nvlink", "pcie")


@dataclass(frozen=True)
class GpuProfile:
    name: str
    peak_flops: float  # dense bf16 tensor FLOP/s
    mem_bandwidth: float  # bytes/s
    memory: float  # bytes
    eff_matmul: float
    eff_attention: float
    eff_conv: float
    eff_memory: float = 0.7
    launch_s: float = 8e-6
    nvlink_bandwidth: float = 0.0  # bytes/s each way per GPU; 0: none
    nvlink_pairs_only: bool = False  # NVLink bridges join pairs only (A6000)
    pcie_bandwidth: float = 12e9  # bytes/s each way per GPU in an all-to-all
    pcie_latency_s: float = 25e-6
    nvlink_latency_s: float = 10e-6
    host_bandwidth: float = 24e9  # node aggregate for CPU offload copies
    calibrated: bool = False  # measured on this machine (the "this" profile)
    host_cores: int = 0  # CPU "GPUs": the cores that all ranks share; 0 on real GPUs
    crowded_bandwidth: float = 0.0  # CPU ranks: collectives with more ranks than cores
    crowded_latency_s: float = 0.0
    sp_overhead: float = 0.0  # per extra sequence-parallel rank: see SP_OVERHEAD


GB = 1e9
# The work a step divides over d sequence-parallel ranks (GEMMs, attention, elementwise) takes
# (1 + SP_OVERHEAD * (d - 1)) times its ideal share on each rank: 1.04x on 2 ranks, 1.28x on 8.
# Fitted, not derived: to xDiT's published Ulysses runs of HunyuanVideo on 1-8 H100s
# (pipedit.planner.published, `pipedit plan --validate-published`; fit_sp_overhead there gives this
# value), so that the predicted speedup over one GPU matches the published one: the median of
# predicted/published speedup over those 6 multi-GPU cells is 1.00, where without this term it was
# 1.07 (1280x720x129 on 8 GPUs: 7.1x predicted, 5.6x published; 239 s predicted, 338 s published;
# now 298 s). The modelled communication is not the gap and stays as it was: the all-to-alls are
# about 1% of an H100 step at these shapes (0.7% on 2 GPUs, 1.3% on 8), and a 4x slower all-to-all
# would add 8 s of the 98 s missing on 8 GPUs. What the term stands for, end-to-end totals cannot
# tell apart: blocking collectives waiting for the slowest rank four times a layer, layout copies
# around each all-to-all, work every rank repeats, or a serial part outside the steps (it behaves as
# 4% of the one-GPU step that does not shrink with ranks). One value for every datasheet profile
# (the only multi-GPU figures found with stated degrees are H100's); the measured CPU profile keeps 0
# (pipedit.planner.calibrate fits its collectives to a measured multi-rank step instead).
SP_OVERHEAD = 0.04
PROFILES: dict[str, GpuProfile] = {
    "a6000": GpuProfile("RTX A6000 48GB", 154.8e12, 768 * GB, 48 * GB, eff_matmul=0.55, eff_attention=0.45,
                        eff_conv=0.25, nvlink_bandwidth=0.8 * 56 * GB, nvlink_pairs_only=True,
                        sp_overhead=SP_OVERHEAD),
    "l40": GpuProfile("L40 48GB", 181e12, 864 * GB, 48 * GB, eff_matmul=0.45, eff_attention=0.3, eff_conv=0.25,
                      sp_overhead=SP_OVERHEAD),
    "h100": GpuProfile("H100 SXM 80GB", 989e12, 3350 * GB, 80 * GB, eff_matmul=0.6, eff_attention=0.35,
                       eff_conv=0.25, nvlink_bandwidth=0.8 * 450 * GB, pcie_bandwidth=24e9, host_bandwidth=48e9,
                       sp_overhead=SP_OVERHEAD),
    "h200": GpuProfile("H200 SXM 141GB", 989e12, 4800 * GB, 141 * GB, eff_matmul=0.6, eff_attention=0.35,
                       eff_conv=0.25, nvlink_bandwidth=0.8 * 450 * GB, pcie_bandwidth=24e9, host_bandwidth=48e9,
                       sp_overhead=SP_OVERHEAD),
}


DEFAULT_INTER_NODE_GBPS = 400.0  # `pipedit plan --inter-node`: a 400 Gb/s network between nodes
INTER_NODE_LATENCY_S = 15e-6  # one message between nodes (RDMA, NCCL's network transport)


@dataclass(frozen=True)
class Node:
    """`gpus` GPUs of one profile and how they talk."""

    gpu: GpuProfile
    gpus: int  # on all nodes together
    interconnect: str  # "nvlink" or "pcie": the links inside a node
    nodes: int = 1  # nodes the GPUs are split over evenly (parallel.nodes)
    # The network between nodes: bytes/s each way per node, shared by the node's GPUs that send
    # across at once (one 400 Gb/s NIC per node by default; a node with a NIC per GPU has 8x that).
    inter_node_bandwidth: float = DEFAULT_INTER_NODE_GBPS * 1e9 / 8

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    def cross_transfer_s(self, nbytes: float, senders: int) -> float:
        """`senders` GPUs of one node each move `nbytes` to another node at once."""
        return INTER_NODE_LATENCY_S + nbytes * max(1, senders) / self.inter_node_bandwidth

    def collective_bandwidth(self, group: int) -> float:
        """Bytes/s each way per GPU for an all-to-all or ring exchange among `group` GPUs."""
        if self.interconnect == "nvlink" and self.gpu.nvlink_bandwidth:
            if not self.gpu.nvlink_pairs_only or group <= 2:
                return self.gpu.nvlink_bandwidth
            # Pairs bridged: 1 of the group-1 peers is on NVLink, the rest cross PCIe.
            return self.gpu.pcie_bandwidth * (group - 1) / (group - 2)
        return self.gpu.pcie_bandwidth

    def latency(self, group: int) -> float:
        nvlink = self.interconnect == "nvlink" and self.gpu.nvlink_bandwidth and \
            (not self.gpu.nvlink_pairs_only or group <= 2)
        return self.gpu.nvlink_latency_s if nvlink else self.gpu.pcie_latency_s

    def transfer_s(self, nbytes: float, group: int) -> float:
        return self.latency(group) + nbytes / self.collective_bandwidth(group)

    def offload_s(self, nbytes_per_gpu: float, gpus: int) -> float:
        """Every one of `gpus` GPUs moves `nbytes_per_gpu` to or from host memory at once."""
        per_gpu = min(self.gpu.pcie_bandwidth * 2, self.gpu.host_bandwidth / max(1, gpus))
        return nbytes_per_gpu / per_gpu


def profile(name: str) -> GpuProfile:
    """A datasheet profile; "this" is measured: pipedit.planner.calibrate.resolve_profile gives it."""
    if name == "this":
        raise ValueError("the 'this' profile is measured: planner.calibrate.resolve_profile gives it")
    if name not in PROFILES:
        raise UserInputError(f"unknown GPU '{name}'; profiles: {', '.join(GPUS)}")
    return PROFILES[name]


def node(gpu: str, gpus: int, interconnect: str) -> Node:
    if interconnect not in INTERCONNECTS:
        raise UserInputError(f"--interconnect must be one of {', '.join(INTERCONNECTS)}, got {interconnect!r}")
    if gpus < 1:
        raise UserInputError(f"--gpus must be at least 1, got {gpus}")
    return make_node(profile(gpu), gpus, interconnect)


def make_node(prof: GpuProfile, gpus: int, interconnect: str) -> Node:
    if prof.host_cores:
        # CPU ranks share the cores: more ranks than cores time-share them, even when only one
        # computes (measured with the demo model on 3 ranks over 2 cores: a sequential decode on
        # rank 0 took as long as a DeDiVAE decode beside two denoising ranks). A rank's extra
        # threads (pipedit.runtime.rank gives it cores // ranks) are not counted: the small
        # models CPUs run are bound by per-op overhead, which threads do not shorten.
        share = min(1.0, prof.host_cores / gpus)
        shared = replace(prof, peak_flops=prof.peak_flops * share, mem_bandwidth=prof.mem_bandwidth * share)
        if gpus > prof.host_cores and prof.crowded_latency_s:
            shared = replace(shared, pcie_bandwidth=prof.crowded_bandwidth, pcie_latency_s=prof.crowded_latency_s)
        return Node(shared, gpus, "pcie")
    if interconnect == "nvlink" and not prof.nvlink_bandwidth:
        raise UserInputError(f"{prof.name} has no NVLink; use --interconnect pcie")
    return Node(prof, gpus, interconnect)




def profile_for_gpu_name(gpu_name: str) -> str | None:
    """The profile key for a GPU model name as the driver reports it ("NVIDIA H100 80GB HBM3"),
    None when no profile matches."""
    name = gpu_name.upper().replace(" ", "")
    for key in ("h200", "h100", "l40", "a6000"):
        if key.upper() in name and not (key == "l40" and "L40S" in name):
            return key
    return None
