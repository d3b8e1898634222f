import torch
import torch.nn as nn

from ckernel import load_c

C_SOURCE = r"""
void kernel(const float* a, const float* b, float* c, long M, long K, long N) {
    #pragma omp parallel for
    for (long i = 0; i < M; i++) {
        float* crow = c + i * N;
        for (long j = 0; j < N; j++) crow[j] = 0.0f;
        for (long k = 0; k < K; k++) {
            float aik = a[i * K + k];
            const float* brow = b + k * N;
            #pragma omp simd
            for (long j = 0; j < N; j++) crow[j] += aik * brow[j];
        }
    }
}
"""

M = 384
K = 383
N = 385


class ModelNew(nn.Module):
    """Square matrix product A @ B. C kernel, OpenMP."""

    def __init__(self):
        super().__init__()
        self.lib = load_c()

    def forward(self, a, b):
        c = torch.empty(a.shape[0], b.shape[1])
        self.lib.kernel(a, b, c, a.shape[0], a.shape[1], b.shape[1])
        return c
