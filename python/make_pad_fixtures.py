"""Writes the real exported models of the pad-probe tests into
testdata/padprobe (run with the zoo venv: make padprobe-fixtures):

    timemean   Conv1d over time, then the mean over time: the time dim is NOT
               pad-safe (padded steps change the mean).
    groupnorm  Conv1d, GroupNorm over (channels, time), Conv1d: NOT pad-safe
               (the statistics see the padded steps).
    attention  a Transformer encoder layer with a key padding mask input
               (1 = token, 0 = padding): pad-safe when the mask is padded
               with 0, which is xserve's default pad value.
    stridedpool
               two Conv2d of stride 2, a global average pool over (height,
               width) and a Linear: NEITHER height nor width is pad-safe,
               yet padding 1 -> 2 (or 63 -> 64) rows is invisible, since the
               strided convolutions' own zero padding covers the padded row
               (the PaddleOCR classifier served wrong by the old probe).
               Exported with torch.onnx (TorchScript, ONNX dim_params batch,
               height, width) only, as stridedpool.ts.onnx, with ONNX
               Runtime's outputs (checked against PyTorch eager's) at
               [3,3,48,192] and [1,3,20,7].

Each is exported three ways, with a dynamic batch and time dim:
    <name>.dynamo.onnx   torch.onnx.export(dynamo=True)
    <name>.ts.onnx       torch.onnx.export(dynamo=False) with dynamic_axes on
                         the inputs only, so the outputs' dims are unknown
    <name>.pt2           torch.export.export + torch.export.save (no
                         run_decompositions; symbols s0, s1, ... with min 2)
and PyTorch eager's outputs for inputs at batch 3, time 7 and batch 1,
time 5 (sizes that are not bucket sizes) as <name>.b<B>t<T>.in.<input>.npy
and <name>.b<B>t<T>.out.npy. Weights are seeded; the files are small.
"""

import os
import sys

import numpy as np
import torch
from torch import nn
from torch.export import Dim

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "padprobe")
CASES = [(3, 7), (1, 5)]


class TimeMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)

    def forward(self, x):  # x: [batch, 4, time]
        return torch.relu(self.conv(x)).mean(dim=2)  # [batch, 8]


class GroupNormTime(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(4, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.conv2 = nn.Conv1d(8, 4, 1)

    def forward(self, x):  # x: [batch, 4, time]
        return self.conv2(self.norm(self.conv1(x)))  # [batch, 4, time]


class MaskedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, 16)
        self.layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)

    def forward(self, x, mask):  # x: [batch, time, 6] float, mask: [batch, time] int64
        h = self.embed(x)
        pad = mask == 0
        # Eager attention on the additive mask (the fast path is not exported).
        bias = torch.zeros(pad.shape, dtype=h.dtype).masked_fill(pad, -1e9)
        q = self.layer.self_attn
        b, t, d = h.shape
        qkv = nn.functional.linear(h, q.in_proj_weight, q.in_proj_bias).reshape(b, t, 3, 2, d // 2).permute(2, 0, 3, 1, 4)
        att = (qkv[0] @ qkv[1].transpose(-1, -2)) / (d // 2) ** 0.5 + bias[:, None, None, :]
        o = (att.softmax(-1) @ qkv[2]).transpose(1, 2).reshape(b, t, d)
        h = self.layer.norm1(h + q.out_proj(o))
        h = self.layer.norm2(h + self.layer.linear2(torch.relu(self.layer.linear1(h))))
        return h  # [batch, time, 16]


def inputs_for(name, b, t, gen):
    if name == "attention":
        x = torch.randn(b, t, 6, generator=gen)
        mask = torch.ones(b, t, dtype=torch.int64)
        mask[0, t - 2:] = 0  # the first row ends with two padding tokens of its own
        return {"x": x, "mask": mask}
    return {"x": torch.randn(b, 4, t, generator=gen)}


def export(name, module):
    module.eval()
    gen = torch.Generator().manual_seed(1)
    example = inputs_for(name, 2, 6, gen)
    batch, time = Dim("batch", min=1, max=64), Dim("time", min=2, max=64)
    time_axis = 1 if name == "attention" else 2
    dyn = {k: ({0: batch, 1: time} if v.dim() == 2 or name == "attention" else {0: batch, time_axis: time}) for k, v in example.items()}
    args = tuple(example.values())
    names = list(example.keys())

    ep = torch.export.export(module, args, dynamic_shapes=dyn)
    torch.export.save(ep, os.path.join(OUT, f"{name}.pt2"))
    torch.onnx.export(module, args, os.path.join(OUT, f"{name}.dynamo.onnx"), dynamo=True, opset_version=18,
                      input_names=names, output_names=["y"], dynamic_shapes=dyn, external_data=False)
    axes = {k: ({0: "batch", 1: "time"} if name == "attention" else {0: "batch", 2: "time"}) for k in names}
    torch.onnx.export(module, args, os.path.join(OUT, f"{name}.ts.onnx"), dynamo=False, opset_version=17,
                      input_names=names, output_names=["y"], dynamic_axes=axes)

    for b, t in CASES:
        inp = inputs_for(name, b, t, gen)
        with torch.no_grad():
            y = module(*inp.values())
        for k, v in inp.items():
            np.save(os.path.join(OUT, f"{name}.b{b}t{t}.in.{k}.npy"), v.numpy())
        np.save(os.path.join(OUT, f"{name}.b{b}t{t}.out.npy"), y.numpy())
    print(f"{name}: exported", file=sys.stderr)


class StridedPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):  # x: [batch, 3, height, width]
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(h.mean(dim=(2, 3)))  # [batch, 4]


def export_image(name, module, shapes):
    module.eval()
    gen = torch.Generator().manual_seed(2)
    example = torch.randn(2, 3, 32, 48, generator=gen)
    torch.onnx.export(module, (example,), os.path.join(OUT, f"{name}.ts.onnx"), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}})
    import onnxruntime  # the reference; imported here so the other fixtures do not need it

    sess = onnxruntime.InferenceSession(os.path.join(OUT, f"{name}.ts.onnx"))
    for shape in shapes:
        x = torch.randn(*shape, generator=gen)
        with torch.no_grad():
            eager = module(x).numpy()
        y = sess.run(None, {"x": x.numpy()})[0]
        np.testing.assert_allclose(y, eager, rtol=1e-5, atol=1e-6)
        tag = "x".join(str(d) for d in shape)
        np.save(os.path.join(OUT, f"{name}.{tag}.in.x.npy"), x.numpy())
        np.save(os.path.join(OUT, f"{name}.{tag}.out.npy"), y)
    print(f"{name}: exported", file=sys.stderr)


def main():
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)
    export("timemean", TimeMean())
    export("groupnorm", GroupNormTime())
    export("attention", MaskedAttention())
    export_image("stridedpool", StridedPool(), [(3, 3, 48, 192), (1, 3, 20, 7)])


if __name__ == "__main__":
    main()
