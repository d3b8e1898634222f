import torch
import torch.nn as nn

from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* x, float* y, long n) {
    #pragma omp parallel for simd
    for (long i = 0; i < n; i++) {
        float v = x[i];
        y[i] = v > 0.0f ? v : expm1f(v);
    }
}
"""

batch_size = 1023
dim = 4093


class ModelNew(nn.Module):
    """ELU activation with alpha 1. C kernel, OpenMP."""

    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty_like(x)
        self.lib.kernel(x, y, x.numel())
        return y
