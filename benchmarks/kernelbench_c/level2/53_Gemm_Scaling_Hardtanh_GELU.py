"""KernelBench v0 level2/53_Gemm_Scaling_Hardtanh_GELU: gemm, * s, hardtanh, GELU. C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

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
            v = fminf(fmaxf(v * p0, p1), p2); v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
            out[b * outf + o] = v;
        }
}
"""


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor, hardtanh_min, hardtanh_max):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max
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
            float(self.scaling_factor),
            float(self.hardtanh_min),
            float(self.hardtanh_max),
        )
        return y
