import torch
import torch.nn as nn


class Model(nn.Module):
    """Fused multiply-add: a * b + c."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b, c):
        return a * b + c


batch_size = 1023
dim = 4093


def get_inputs():
    a = torch.randn(batch_size, dim)
    b = torch.randn(batch_size, dim)
    c = torch.randn(batch_size, dim)
    return [a, b, c]


def get_init_inputs():
    return []
