import torch
import torch.nn as nn


class Model(nn.Module):
    """Fused sequence: Linear then ReLU."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 256
in_features = 509
out_features = 384


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return []
