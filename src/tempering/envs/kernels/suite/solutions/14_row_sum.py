import torch
import torch.nn as nn

from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* x, float* y, long rows, long cols) {
    #pragma omp parallel for
    for (long r = 0; r < rows; r++) {
        const float* row = x + r * cols;
        float acc = 0.0f;
        #pragma omp simd reduction(+:acc)
        for (long c = 0; c < cols; c++) { acc += row[c]; }
        y[r] = acc;
    }
}
"""

rows = 2048
cols = 4093


class ModelNew(nn.Module):
    """Sum over the last dimension. C kernel, OpenMP."""

    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty(x.shape[0])
        self.lib.kernel(x, y, x.shape[0], x.shape[1])
        return y
