import torch
import torch.nn as nn


class Model(nn.Module):
    """LeakyReLU with negative slope 0.01."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, negative_slope=0.01)


batch_size = 1023
dim = 4093


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
