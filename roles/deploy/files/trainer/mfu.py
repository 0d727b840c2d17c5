"""Model FLOPs utilisation: achieved training FLOP/s over the GPU's dense bf16 peak."""

import re

# Dense (not sparse) bf16 tensor-core peak per GPU, from the vendor data sheets. A rule
# matches when every one of its words is a word of torch.cuda.get_device_name(); the first
# match wins, so specific variants come before the family. No match: MFU is not reported.
PEAK_BF16_FLOPS = [
    (("GH200",), 989e12),
    (("H200", "NVL"), 835e12),
    (("H200",), 989e12),
    (("H100", "NVL"), 835e12),
    (("H100", "PCIE"), 756e12),
    (("H100", "HBM3"), 989e12),  # H100 SXM reports itself as "NVIDIA H100 80GB HBM3"
    (("H100", "SXM5"), 989e12),
    (("B200",), 2250e12),
    (("A100",), 312e12),
    (("L40S",), 362e12),
    (("L40",), 181e12),
    (("L4",), 121e12),
    (("A40",), 150e12),
    (("A30",), 165e12),
    (("A10",), 125e12),
]


def peak_bf16_flops(device_name):
    """Peak dense bf16 FLOP/s of the named GPU, or None when it is not in the table."""
    words = set(re.split(r"[^A-Z0-9]+", device_name.upper()))
    for required, peak in PEAK_BF16_FLOPS:
        if words.issuperset(required):
            return peak
    return None


def mfu(flops_per_token, tokens_per_s, world_size, peak_flops):
    """Fraction of peak reached, tokens_per_s being the throughput of all world_size GPUs."""
    return flops_per_token * tokens_per_s / (world_size * peak_flops)
