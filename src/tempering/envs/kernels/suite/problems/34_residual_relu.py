import torch
import torch.nn as nn


class Model(nn.Module):
    """Fused sequence: residual add then ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, x, res):
        return torch.relu(x + res)


batch_size = 1023
dim = 4093


def get_inputs():
    x = torch.randn(batch_size, dim)
    res = torch.randn(batch_size, dim)
    return [x, res]


def get_init_inputs():
    return []
