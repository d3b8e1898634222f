import torch
import torch.nn as nn


class Model(nn.Module):
    """Divide each row by its Euclidean norm."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.linalg.vector_norm(x, dim=1, keepdim=True)


rows = 2048
cols = 4093


def get_inputs():
    x = torch.randn(rows, cols)
    return [x]


def get_init_inputs():
    return []
