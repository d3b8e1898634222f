"""KernelBench v0 level1/23_Softmax: softmax over dim 1. C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* in, float* out, long rows, long cols) {
    #pragma omp parallel for
    for (long r = 0; r < rows; r++) {
        const float* x = in + r * cols; float* e = out + r * cols;
        float m = -INFINITY;
        for (long j = 0; j < cols; j++) m = fmaxf(m, x[j]);
        double s = 0.0;
        for (long j = 0; j < cols; j++) { e[j] = expf(x[j] - m); s += e[j]; }
        float inv = (float)(1.0 / s);
        for (long j = 0; j < cols; j++) e[j] *= inv;
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty_like(x)
        self.lib.kernel(x.contiguous(), y, x.shape[0], x.shape[1])
        return y
