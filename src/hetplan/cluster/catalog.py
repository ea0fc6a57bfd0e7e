"""Device catalog: spec-sheet figures of common accelerators, in SI units.

Conventions (all entries):

- ``peak_flops`` are *dense* peak figures (no structured sparsity). ``fp16``/``bf16`` are
  tensor-core figures with FP32 accumulate where the device has tensor cores (that is what
  PyTorch autocast uses), else the native half-precision rate. ``tf32`` only on Ampere and
  newer. Missing dtypes fall back to fp32 in :meth:`DeviceType.flops`.
- ``memory_bytes``: nominal capacity; vendors' "GB" for HBM/GDDR is GiB (nvidia-smi reports
  e.g. 40960 MiB total for A100-40GB), so capacities are in GiB.
- ``max_power_w``: TDP/TGP from the spec sheet. ``idle_power_w``: a named fraction of TDP
  (below) unless a figure is given, from publicly posted ``nvidia-smi`` idle readings.
- ``price_per_hour``: AWS on-demand us-east-1 list price of the smallest instance with that
  GPU divided by its GPU count (2023 price list); None where no typical rental exists.
"""

from __future__ import annotations

from hetplan.cluster.spec import DeviceType
from hetplan.errors import InputError
from hetplan.units import TERA, GiB

GBPS = 1e9  # spec sheets quote memory bandwidth in decimal GB/s

# Idle power as a fraction of TDP (dimensionless). Datacenter HBM GPUs kept in P0 by
# persistence mode idle near 18% of TDP: V100-SXM2 reads 53-57 W of 300 W at 0% utilisation
# (nvidia-smi in github.com/NVIDIA/nvidia-docker/issues/1076 and zai-org/GLM-130B/issues/32).
IDLE_FRACTION_DATACENTER = 0.18
# GDDR cards that drop to P8 idle at 4-10% of TDP: RTX A4000 5-7 W of 140 W
# (RainbowMiner/RainbowMiner/issues/1796), a 180 W GeForce 10 W (NVIDIA/nvidia-docker/issues/564),
# A40 ~30 W of 300 W (NVIDIA/open-gpu-kernel-modules/issues/874). We take the middle.
IDLE_FRACTION_P8 = 0.07
# Jetson modules: a few watts idle on a 10-15 W budget (tegrastats readings; rough).
IDLE_FRACTION_EMBEDDED = 0.2


def _dev(
    name: str,
    *,
    fp32: float,
    tf32: float | None = None,
    fp16: float | None = None,
    bf16: float | None = None,
    mem_gib: float,
    bw_gbps: float,
    max_w: float,
    idle_frac: float | None = None,
    idle_w: float | None = None,
    price: float | None = None,
    source: str,
) -> DeviceType:
    """Build a catalog entry from spec-sheet units (TFLOP/s, GiB, GB/s, W)."""
    flops = {"fp32": fp32 * TERA}
    for key, val in (("tf32", tf32), ("fp16", fp16), ("bf16", bf16)):
        if val is not None:
            flops[key] = val * TERA
    if idle_w is None:
        assert idle_frac is not None, name
        idle_w = idle_frac * max_w
    return DeviceType(
        name=name,
        is_cpu=name == "cpu",
        peak_flops=flops,
        memory_bandwidth=bw_gbps * GBPS,
        memory_bytes=mem_gib * GiB,
        idle_power_w=idle_w,
        max_power_w=max_w,
        price_per_hour=price,
        source=source,
    )


_DC = IDLE_FRACTION_DATACENTER
_P8 = IDLE_FRACTION_P8

# fmt: off
_ENTRIES = [
    # NVIDIA Tesla V100 datasheet (2018), SXM2: 15.7 FP32, 125 tensor TFLOPS, 900 GB/s, 300 W.
    # Idle 55 W: nvidia-smi readings 53-57 W cited above. Price: p3.2xlarge $3.06/h, 1 GPU.
    _dev("V100-16GB", fp32=15.7, fp16=125, mem_gib=16, bw_gbps=900, max_w=300, idle_w=55,
         price=3.06, source="NVIDIA Tesla V100 datasheet 2018 (SXM2)"),
    # Same datasheet, 32 GB SXM2. Price: p3dn.24xlarge $31.212/h / 8 GPUs.
    _dev("V100-32GB", fp32=15.7, fp16=125, mem_gib=32, bw_gbps=900, max_w=300, idle_w=55,
         price=31.212 / 8, source="NVIDIA Tesla V100 datasheet 2018 (SXM2)"),
    # NVIDIA A100 Tensor Core GPU datasheet (2021), SXM4: 19.5 FP32, 156 TF32, 312 FP16/BF16
    # dense; 40GB 1555 GB/s, 80GB 2039 GB/s; 400 W. Price: p4d.24xlarge $32.7726/h / 8.
    _dev("A100-40GB", fp32=19.5, tf32=156, fp16=312, bf16=312, mem_gib=40, bw_gbps=1555,
         max_w=400, idle_frac=_DC, price=32.7726 / 8,
         source="NVIDIA A100 datasheet 2021 (SXM4 40GB)"),
    # Price: p4de.24xlarge $40.9657/h / 8.
    _dev("A100-80GB", fp32=19.5, tf32=156, fp16=312, bf16=312, mem_gib=80, bw_gbps=2039,
         max_w=400, idle_frac=_DC, price=40.9657 / 8,
         source="NVIDIA A100 datasheet 2021 (SXM4 80GB)"),
    # NVIDIA H100 Tensor Core GPU datasheet (2023), SXM5: 67 FP32, 494.5 TF32, 989.5 FP16/BF16
    # dense (half the starred sparsity figures), 80 GB HBM3 3.35 TB/s, up to 700 W.
    # Price: p5.48xlarge $98.32/h / 8.
    _dev("H100-SXM", fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, mem_gib=80, bw_gbps=3350,
         max_w=700, idle_frac=_DC, price=98.32 / 8, source="NVIDIA H100 datasheet 2023 (SXM5)"),
    # Same datasheet, H100 PCIe: 51 FP32, 378 TF32, 756 FP16/BF16 dense, 2.0 TB/s, 350 W.
    _dev("H100-PCIe", fp32=51, tf32=378, fp16=756, bf16=756, mem_gib=80, bw_gbps=2000,
         max_w=350, idle_frac=_DC, source="NVIDIA H100 datasheet 2023 (PCIe)"),
    # NVIDIA GH200 Grace Hopper Superchip datasheet (2023), its H100 GPU: 67 FP32, 494 TF32,
    # 990 FP16/BF16 dense, 96 GB HBM3 at 4.0 TB/s; the superchip's module power is
    # configurable from 450 to 1000 W (CPU and memory included): the top of that range.
    _dev("GH200", fp32=67, tf32=494, fp16=990, bf16=990, mem_gib=96, bw_gbps=4000,
         max_w=1000, idle_frac=_DC, source="NVIDIA GH200 Grace Hopper Superchip datasheet 2023"),
    # NVIDIA T4 datasheet (2019): 8.1 FP32, 65 FP16 mixed, 16 GB GDDR6 320 GB/s, 70 W.
    # Price: g4dn.xlarge $0.526/h.
    _dev("T4", fp32=8.1, fp16=65, mem_gib=16, bw_gbps=320, max_w=70, idle_frac=_P8,
         price=0.526, source="NVIDIA T4 datasheet 2019"),
    # NVIDIA Tesla P100 datasheet (2016), PCIe 16GB: 9.3 FP32, 18.7 FP16, 732 GB/s, 250 W.
    _dev("P100", fp32=9.3, fp16=18.7, mem_gib=16, bw_gbps=732, max_w=250, idle_frac=_DC,
         source="NVIDIA Tesla P100 datasheet 2016 (PCIe 16GB)"),
    # NVIDIA Tesla P40 datasheet (2016): 12 FP32, 24 GB GDDR5 346 GB/s, 250 W. GP102 (sm_61)
    # runs FP16 at 1/64 of FP32 (CUDA C Programming Guide, arithmetic instruction throughput).
    _dev("P40", fp32=12, fp16=12 / 64, mem_gib=24, bw_gbps=346, max_w=250, idle_frac=_P8,
         source="NVIDIA Tesla P40 datasheet 2016"),
    # NVIDIA TITAN RTX product page / Turing whitepaper (2018): 16.3 FP32, 130 FP16 tensor
    # with FP32 accumulate (full rate on TITAN), 24 GB GDDR6 672 GB/s, 280 W.
    _dev("TitanRTX", fp32=16.3, fp16=130, mem_gib=24, bw_gbps=672, max_w=280, idle_frac=_P8,
         source="NVIDIA Turing whitepaper 2018 (TITAN RTX)"),
    # NVIDIA Turing whitepaper (2018), RTX 2080 Ti (reference clocks): 13.4 FP32, 53.8 FP16
    # tensor with FP32 accumulate (GeForce half rate), 11 GB GDDR6 616 GB/s, 250 W.
    _dev("RTX2080-Ti", fp32=13.4, fp16=53.8, mem_gib=11, bw_gbps=616, max_w=250,
         idle_frac=_P8, source="NVIDIA Turing whitepaper 2018 (RTX 2080 Ti)"),
    # NVIDIA Ampere GA102 whitepaper (2020), RTX 3090: 35.6 FP32, 35.6 TF32, 71 FP16/BF16
    # tensor with FP32 accumulate (GeForce half rate), 24 GB GDDR6X 936 GB/s, 350 W.
    _dev("RTX3090", fp32=35.6, tf32=35.6, fp16=71, bf16=71, mem_gib=24, bw_gbps=936,
         max_w=350, idle_frac=_P8, source="NVIDIA GA102 whitepaper 2020 (RTX 3090)"),
    # NVIDIA Ada Lovelace whitepaper (2022), RTX 4090: 82.6 FP32, 82.6 TF32, 165.2 FP16/BF16
    # tensor with FP32 accumulate, 24 GB GDDR6X 1008 GB/s, 450 W.
    _dev("RTX4090", fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, mem_gib=24, bw_gbps=1008,
         max_w=450, idle_frac=_P8, source="NVIDIA Ada Lovelace whitepaper 2022 (RTX 4090)"),
    # NVIDIA L4 datasheet (2023): 30.3 FP32, 60 TF32, 121 FP16/BF16 dense, 24 GB GDDR6
    # 300 GB/s, 72 W. Price: g6.xlarge $0.8048/h.
    _dev("L4", fp32=30.3, tf32=60, fp16=121, bf16=121, mem_gib=24, bw_gbps=300, max_w=72,
         idle_frac=_P8, price=0.8048, source="NVIDIA L4 datasheet 2023"),
    # A10G (AWS G5 variant of GA102; NVIDIA publishes no datasheet, so approximate): FP32 31.2
    # and 24 GB GDDR6 600 GB/s as the A10 (NVIDIA A10 datasheet 2021); tensor 35 TF32 / 70
    # FP16/BF16 dense as third-party spec listings report for the A10G (about half the A10's
    # 62.5/125); nvidia-smi on g5 instances shows a 300 W cap. Price: g5.xlarge $1.006/h.
    _dev("A10G", fp32=31.2, tf32=35, fp16=70, bf16=70, mem_gib=24, bw_gbps=600, max_w=300,
         idle_frac=_P8, price=1.006,
         source="approximate: NVIDIA A10 datasheet 2021 + third-party A10G listings"),
    # NVIDIA GeForce GTX 1050 spec page (2016): 640 cores x 1455 MHz boost x 2 = 1.862 FP32,
    # 2 GB GDDR5 112 GB/s, 75 W; sm_61 FP16 at 1/64 rate (CUDA C Programming Guide).
    _dev("GTX1050", fp32=1.862, fp16=1.862 / 64, mem_gib=2, bw_gbps=112, max_w=75,
         idle_frac=_P8, source="NVIDIA GeForce GTX 1050 spec page 2016"),
    # NVIDIA Jetson TX1 module datasheet (2016): 256 Maxwell cores, 1 TFLOPS FP16 = 0.512
    # FP32, 4 GB LPDDR4 25.6 GB/s shared with the CPU, ~15 W max module power.
    _dev("JetsonTX1", fp32=0.512, fp16=1.024, mem_gib=4, bw_gbps=25.6, max_w=15,
         idle_frac=IDLE_FRACTION_EMBEDDED, source="NVIDIA Jetson TX1 module datasheet 2016"),
    # NVIDIA Jetson TX2 module datasheet (2017): 256 Pascal cores at 1.3 GHz = 0.665 FP32,
    # 1.33 FP16, 8 GB LPDDR4 59.7 GB/s shared, 15 W (Max-P mode).
    _dev("JetsonTX2", fp32=0.665, fp16=1.33, mem_gib=8, bw_gbps=59.7, max_w=15,
         idle_frac=IDLE_FRACTION_EMBEDDED, source="NVIDIA Jetson TX2 module datasheet 2017"),
    # Generic x86 core (rough default; run `hetplan profile` for real figures): AVX2 with two
    # FMA units = 32 FP32 FLOP/cycle at 3 GHz = 0.096 TFLOP/s (Intel optimization manual,
    # Haswell/Skylake); ~10 GB/s single-core STREAM; 8 GiB of RAM per process assumed; 105 W
    # / 12 cores = 8.75 W per core (Xeon Gold 5118 ARK, the CPU of paper 003's cluster); idle
    # 2 W per core is a rough share of a server package's idle draw.
    _dev("cpu", fp32=0.096, mem_gib=8, bw_gbps=10, max_w=8.75, idle_w=2.0,
         source="rough x86 core default (AVX2 FMA @3 GHz); replace with a measured profile"),
]
# fmt: on

DEVICE_CATALOG: dict[str, DeviceType] = {d.name: d for d in _ENTRIES}
"""Catalog device types by canonical name."""

_BY_LOWER = {name.lower(): dt for name, dt in DEVICE_CATALOG.items()}


def catalog_name(name: str) -> str | None:
    """Canonical catalog name for ``name`` (case-insensitive), or None if unknown."""
    dt = _BY_LOWER.get(name.lower())
    return dt.name if dt is not None else None


def device_type(name: str) -> DeviceType:
    """The catalog entry called ``name`` (case-insensitive)."""
    dt = _BY_LOWER.get(name.lower())
    if dt is None:
        known = ", ".join(DEVICE_CATALOG)
        raise InputError(f"unknown device type {name!r}; known: {known}")
    return dt
