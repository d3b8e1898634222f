import torch
import torch.nn as nn

from ckernel import load_c

C_SOURCE = r"""
void kernel(const float* a, const float* b, float* y, long n) {
    #pragma omp parallel for simd
    for (long i = 0; i < n; i++) y[i] = a[i] + b[i];
}
"""

batch_size = 1023
dim = 4093


class ModelNew(nn.Module):
    """Elementwise sum of two tensors. C kernel, OpenMP."""

    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, a, b):
        y = torch.empty_like(a)
        self.lib.kernel(a, b, y, a.numel())
        return y
