import torch
import torch.nn as nn

from ckernel import load_c

C_SOURCE = r"""
void kernel(const float* x, const float* r, float* y, long n) {
    #pragma omp parallel for simd
    for (long i = 0; i < n; i++) { float v = x[i] + r[i]; y[i] = v > 0.0f ? v : 0.0f; }
}
"""

batch_size = 1023
dim = 4093


class ModelNew(nn.Module):
    """Fused sequence: residual add then ReLU. C kernel, OpenMP."""

    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, x, res):
        y = torch.empty_like(x)
        self.lib.kernel(x, res, y, x.numel())
        return y
