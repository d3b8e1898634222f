"""KernelBench v0 level1/53_Min_reduction_over_a_dimension: min over dim. C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
/* x viewed as (outer, d1, inner), reduced over d1 */
void kernel(const float* x, float* out, long outer, long d1, long inner) {
    #pragma omp parallel for
    for (long o = 0; o < outer; o++)
        for (long i = 0; i < inner; i++) {
            double acc = INFINITY;
            for (long k = 0; k < d1; k++) { double v = x[(o * d1 + k) * inner + i]; acc = v < acc ? v : acc; }
            out[o * inner + i] = (float)(acc);
        }
}
"""


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.lib = load_c()

    def forward(self, x):
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer, inner = 1, 1
        for k in range(dim):
            outer *= x.shape[k]
        for k in range(dim + 1, x.dim()):
            inner *= x.shape[k]
        shape = list(x.shape)
        del shape[dim]
        y = torch.empty(shape)
        self.lib.kernel(x, y, outer, x.shape[dim], inner)
        return y
