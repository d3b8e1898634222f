"""KernelBench v0 level2/12_Gemm_Multiply_LeakyReLU: gemm, * multiplier, LeakyReLU. C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

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
            v = v * p0; v = v > 0.0f ? v : v * p1;
            out[b * outf + o] = v;
        }
}
"""


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope
        self.lib = load_c()

    def forward(self, x):
        w, b = self.gemm.weight, self.gemm.bias
        y = torch.empty(x.shape[0], w.shape[0])
        self.lib.kernel(
            x.contiguous(),
            w,
            b,
            y,
            x.shape[0],
            x.shape[1],
            w.shape[0],
            float(self.multiplier),
            float(self.negative_slope),
            0.0,
        )
        return y
