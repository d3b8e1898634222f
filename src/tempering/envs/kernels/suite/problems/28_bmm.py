import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix product."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


batch = 16
M = 128
K = 192
N = 160


def get_inputs():
    a = torch.randn(batch, M, K)
    b = torch.randn(batch, K, N)
    return [a, b]


def get_init_inputs():
    return []
