"""KernelBench v0 level1/36_RMSNorm_: x / sqrt(mean(x^2, dim 1) + eps). C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* x, float* out, long outer, long f, long inner, float eps) {
    #pragma omp parallel for
    for (long o = 0; o < outer; o++)
        for (long i = 0; i < inner; i++) {
            double s = 0.0;
            for (long k = 0; k < f; k++) { double v = x[(o * f + k) * inner + i]; s += v * v; }
            float inv = (float)(1.0 / sqrt(s / f + eps));
            for (long k = 0; k < f; k++) out[(o * f + k) * inner + i] = x[(o * f + k) * inner + i] * inv;
        }
}
"""


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.lib = load_c()

    def forward(self, x):
        x = x.contiguous()
        inner = 1
        for k in range(2, x.dim()):
            inner *= x.shape[k]
        y = torch.empty_like(x)
        self.lib.kernel(x, y, x.shape[0], x.shape[1], inner, float(self.eps))
        return y
