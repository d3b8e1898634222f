import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over the first dimension (strided reduction)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=0)


rows = 2048
cols = 4093


def get_inputs():
    x = torch.randn(rows, cols)
    return [x]


def get_init_inputs():
    return []
