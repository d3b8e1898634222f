import torch
import torch.nn as nn

from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* x, float* y, long rows, long cols) {
    #pragma omp parallel for
    for (long r = 0; r < rows; r++) {
        const float* in = x + r * cols; float* out = y + r * cols;
        float m = -INFINITY, s = 0.0f;
        for (long c = 0; c < cols; c++) m = in[c] > m ? in[c] : m;
        for (long c = 0; c < cols; c++) s += expf(in[c] - m);
        float lse = m + logf(s);
        for (long c = 0; c < cols; c++) out[c] = in[c] - lse;
    }
}
"""

rows = 2048
cols = 4093


class ModelNew(nn.Module):
    """LogSoftmax over the last dimension. C kernel, OpenMP."""

    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty_like(x)
        self.lib.kernel(x, y, x.shape[0], x.shape[1])
        return y
