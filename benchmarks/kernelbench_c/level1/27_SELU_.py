"""KernelBench v0 level1/27_SELU_: SELU. C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* in, float* out, long n) {
    #pragma omp parallel for simd
    for (long i = 0; i < n; i++) { float x = in[i]; out[i] = 1.0507009873554805f * (x > 0.0f ? x : 1.6732632423543772f * (expf(x) - 1.0f)); }
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
