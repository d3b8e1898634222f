import torch
import torch.nn as nn

from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* x, const float* w, float* y, long rows, long cols) {
    #pragma omp parallel for
    for (long r = 0; r < rows; r++) {
        const float* in = x + r * cols; float* out = y + r * cols;
        float ss = 0.0f;
        for (long c = 0; c < cols; c++) ss += in[c] * in[c];
        float inv = 1.0f / sqrtf(ss / cols + 1e-6f);
        for (long c = 0; c < cols; c++) out[c] = in[c] * inv * w[c];
    }
}
"""

rows = 2048
cols = 4093


class ModelNew(nn.Module):
    """RMSNorm over the last dimension with a learnable scale. C kernel, OpenMP."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(cols))
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty_like(x)
        self.lib.kernel(x, self.weight, y, x.shape[0], x.shape[1])
        return y
