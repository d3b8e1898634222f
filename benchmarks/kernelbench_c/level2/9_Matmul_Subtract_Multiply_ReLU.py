"""KernelBench v0 level2/9_Matmul_Subtract_Multiply_ReLU: linear, - s, * m, ReLU. C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* x, const float* w, const float* bias, float* out, long batch, long in, long outf, float p0, float p1, float p2) {
    #pragma omp parallel for
    for (long b = 0; b < batch; b++)
        for (long o = 0; o < outf; o++) {
            const float* xr = x + b * in; const float* wr = w + o * in;
            float s = 0.0f;
            #pragma omp simd reduction(+:s)
            for (long i = 0; i < in; i++) s += xr[i] * wr[i];
            float v = s + bias[o];
            v = (v - p0) * p1; v = v > 0.0f ? v : 0.0f;
            out[b * outf + o] = v;
        }
}
"""


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value
        self.lib = load_c()

    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias
        y = torch.empty(x.shape[0], w.shape[0])
        self.lib.kernel(
            x.contiguous(),
            w,
            b,
            y,
            x.shape[0],
            x.shape[1],
            w.shape[0],
            float(self.subtract_value),
            float(self.multiply_value),
            0.0,
        )
        return y
