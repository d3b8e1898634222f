"""KernelBench v0 level1/1_Square_matrix_multiplication_: A @ B (square). C kernel (a legitimate submission: benchmarks/kernel_reward.py)."""

import torch
import torch.nn as nn
from ckernel import load_c

C_SOURCE = r"""
#include <math.h>
void kernel(const float* a, const float* b, float* c, long m, long k, long n) {
    #pragma omp parallel for
    for (long i = 0; i < m; i++) {
        float* crow = c + i * n;
        for (long j = 0; j < n; j++) crow[j] = 0.0f;
        for (long p = 0; p < k; p++) {
            float aip = a[i * k + p]; const float* brow = b + p * n;
            #pragma omp simd
            for (long j = 0; j < n; j++) crow[j] += aip * brow[j];
        }
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, A, B):
        y = torch.empty(A.shape[0], B.shape[1])
        self.lib.kernel(A.contiguous(), B.contiguous(), y, A.shape[0], A.shape[1], B.shape[1])
        return y
