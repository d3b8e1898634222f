import torch
import torch.nn as nn

from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* x, const float* w, const float* b, float* y, long rows, long cols) {
    #pragma omp parallel for
    for (long r = 0; r < rows; r++) {
        const float* in = x + r * cols; float* out = y + r * cols;
        double s = 0.0, ss = 0.0;
        for (long c = 0; c < cols; c++) { s += in[c]; ss += (double)in[c] * in[c]; }
        double mean = s / cols, var = ss / cols - mean * mean;
        float inv = (float)(1.0 / sqrt(var + 1e-5));
        for (long c = 0; c < cols; c++) out[c] = (in[c] - (float)mean) * inv * w[c] + b[c];
    }
}
"""

rows = 2048
cols = 4093


class ModelNew(nn.Module):
    """LayerNorm over the last dimension with learnable weight and bias. C kernel, OpenMP."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(cols)
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty_like(x)
        self.lib.kernel(x, self.norm.weight, self.norm.bias, y, x.shape[0], x.shape[1])
        return y
