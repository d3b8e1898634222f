"""KernelBench v0 level2/14_Gemm_Divide_Sum_Scaling: x @ W.T / 2, summed over dim 1, * s. C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* x, const float* w, float* out, long batch, long in, long hidden, float scale) {
    #pragma omp parallel for
    for (long b = 0; b < batch; b++) {
        double total = 0.0;
        for (long h = 0; h < hidden; h++) {
            float s = 0.0f;
            for (long i = 0; i < in; i++) s += x[b * in + i] * w[h * in + i];
            total += s / 2.0f;
        }
        out[b] = (float)total * scale;
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor
        self.lib = load_c()

    def forward(self, x):
        y = torch.empty(x.shape[0], 1)
        self.lib.kernel(
            x.contiguous(), self.weight, y, x.shape[0], x.shape[1], self.weight.shape[0], float(self.scaling_factor)
        )
        return y
