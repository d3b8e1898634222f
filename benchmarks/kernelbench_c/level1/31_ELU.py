"""KernelBench v0 level1/31_ELU: ELU(alpha). C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* in, float* out, long n, float alpha) {
    #pragma omp parallel for simd
    for (long i = 0; i < n; i++) { float x = in[i]; out[i] = x > 0.0f ? x : alpha * (expf(x) - 1.0f); }
}
"""


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty_like(x)
        self.lib.kernel(x.contiguous(), y, x.numel(), float(self.alpha))
        return y
