import torch
import torch.nn as nn

from ckernel import load_c

C_SOURCE = r"""
#include <string.h>
void kernel(const float* x, float* y, long rows, long cols) {
    memset(y, 0, sizeof(float) * cols);
    for (long r = 0; r < rows; r++) {
        const float* row = x + r * cols;
        #pragma omp simd
        for (long c = 0; c < cols; c++) y[c] += row[c];
    }
}
"""

rows = 2048
cols = 4093


class ModelNew(nn.Module):
    """Sum over the first dimension (strided reduction). C kernel, OpenMP."""

    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty(x.shape[1])
        self.lib.kernel(x, y, x.shape[0], x.shape[1])
        return y
