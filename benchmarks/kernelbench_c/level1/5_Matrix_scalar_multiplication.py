"""KernelBench v0 level1/5_Matrix_scalar_multiplication: A * s. C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* a, float* out, long n, float s) {
    #pragma omp parallel for simd
    for (long i = 0; i < n; i++) out[i] = a[i] * s;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, A, s):
        y = torch.empty_like(A)
        self.lib.kernel(A.contiguous(), y, A.numel(), float(s))
        return y
