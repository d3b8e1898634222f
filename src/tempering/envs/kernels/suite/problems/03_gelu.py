import torch
import torch.nn as nn


class Model(nn.Module):
    """GELU activation (exact, erf form)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.gelu(x)


batch_size = 1023
dim = 4093


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
