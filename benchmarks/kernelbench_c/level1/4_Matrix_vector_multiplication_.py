"""KernelBench v0 level1/4_Matrix_vector_multiplication_: A (M, K) @ B (K, 1). C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* a, const float* b, float* out, long m, long k) {
    #pragma omp parallel for
    for (long i = 0; i < m; i++) {
        const float* row = a + i * k; double s = 0.0;
        for (long j = 0; j < k; j++) s += row[j] * b[j];
        out[i] = (float)s;
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, A, B):
        y = torch.empty(A.shape[0], 1)
        self.lib.kernel(A.contiguous(), B.contiguous(), y, A.shape[0], A.shape[1])
        return y
