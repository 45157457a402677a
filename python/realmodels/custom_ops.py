"""Writes the fixtures of `xserve inspect --unsupported`'s test
(cmd/xserve): a small model that calls two custom operators, exported by the
real exporters, as testdata/unsupported/custom_ops.pt2 (torch.export with
torch.library custom ops) and testdata/unsupported/custom_ops.onnx (the
TorchScript ONNX exporter, the custom ops as nodes of domain "xtest").

    .venv-zoo/bin/python python/realmodels/custom_ops.py [--out testdata/unsupported]

No importer will ever know these operators: they exist only here.
"""

import argparse
import os

import torch


@torch.library.custom_op("xtest::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("xtest::enigma", mutates_args=())
def enigma(x: torch.Tensor, k: int) -> torch.Tensor:
    return x + k


@enigma.register_fake
def _(x, k):
    return torch.empty_like(x)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = torch.relu(self.fc(x))
        y = torch.ops.xtest.mystery(y)
        y = torch.ops.xtest.enigma(y, 3)
        return torch.ops.xtest.mystery(y) + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/unsupported")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    m = Model().eval()
    x = torch.randn(2, 4)
    torch.export.save(torch.export.export(m, (x,)), os.path.join(args.out, "custom_ops.pt2"))

    def sym_mystery(g, x):
        return g.op("xtest::Mystery", x)

    def sym_enigma(g, x, k):
        return g.op("xtest::Enigma", x, k_i=3)

    torch.onnx.register_custom_op_symbolic("xtest::mystery", sym_mystery, 17)
    torch.onnx.register_custom_op_symbolic("xtest::enigma", sym_enigma, 17)
    torch.onnx.export(m, (x,), os.path.join(args.out, "custom_ops.onnx"), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"], custom_opsets={"xtest": 1})


if __name__ == "__main__":
    main()
