"""KernelBench v0 level1/28_HardSigmoid: hardsigmoid. C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* in, float* out, long n) {
    #pragma omp parallel for simd
    for (long i = 0; i < n; i++) { float x = in[i]; out[i] = fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f); }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty_like(x)
        self.lib.kernel(x.contiguous(), y, x.numel())
        return y
