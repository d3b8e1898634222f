import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix-vector product."""

    def __init__(self):
        super().__init__()

    def forward(self, a, v):
        return torch.matmul(a, v)


M = 4096
K = 4093


def get_inputs():
    a = torch.randn(M, K)
    v = torch.randn(K)
    return [a, v]


def get_init_inputs():
    return []
