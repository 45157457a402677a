"""Exports the test fixtures of importer/fx with torch.export.

Run from the repository root with the zoo venv (torch 2.14.1, torchvision 0.29.2):

    .venv-zoo/bin/python importer/fx/testdata/make_fixtures.py

Each fixture is a folder importer/fx/testdata/<name>/ holding model.pt2
(torch.export.save of a small module, random weights from a fixed seed) and,
for each of two input sizes <k>, in<k>_<i>.npy (the inputs) and
out<k>_<j>.npy (the eager PyTorch outputs). The Go tests import each
archive, run it on the XLA CPU plugin and compare.

cond/ is a module that branches on the value of its input (torch.cond, the
higher-order op); its two cases take one branch each. while_loop/ runs a
loop whose trip count is an input value (torch's while_loop). Only they
are rewritten by `make_fixtures.py cond`. map/ applies a body to each
slice of its input (torch._higher_order_ops.map); `make_fixtures.py map`.

resnet18/ also holds targets.txt: the call_function targets of the graph,
in order, as torch prints them after run_decompositions(). Its parameters
are overlapping strided views (stride 1 in every dim) of two small random
storages, so the archive stays small while the graph is torchvision's
resnet18; its zip entries are recompressed with DEFLATE (the content is
what torch wrote).
"""

import io
import os
import shutil
import sys
import zipfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
Dim = torch.export.Dim


# torch dtypes NumPy has only through ml_dtypes: .npy files name them as
# ml_dtypes does (numpy.load reads them back once ml_dtypes is imported).
ML_DTYPES = {torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2"}


def save_ml(path, y):
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": ML_DTYPES[y.dtype], "fortran_order": False, "shape": tuple(y.shape)})
        f.write(y.contiguous().view(torch.uint8).numpy().tobytes())


def save(name, ep, model, cases, deflate=False):
    """Saves ep and the inputs/outputs of model for each case."""
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    path = os.path.join(d, "model.pt2")
    torch.export.save(ep, path)
    if deflate:
        recompress(path)
        torch.export.load(path)  # still a valid archive for torch
    with torch.no_grad():
        for k, inputs in enumerate(cases):
            outs = model(*inputs)
            if isinstance(outs, torch.Tensor):
                outs = (outs,)
            for i, x in enumerate(inputs):
                np.save(os.path.join(d, "in%d_%d.npy" % (k, i)), x.numpy())
            for j, y in enumerate(outs):
                if y.dtype in ML_DTYPES:
                    save_ml(os.path.join(d, "out%d_%d.npy" % (k, j)), y)
                    continue
                np.save(os.path.join(d, "out%d_%d.npy" % (k, j)), y.numpy())
    print("%-14s %7d bytes" % (name, os.path.getsize(path)))


def recompress(path):
    """Rewrites a zip with every entry DEFLATE-compressed, same names and bytes."""
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, data in entries:
            z.writestr(name, data)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def targets(ep):
    out = []
    for n in ep.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        out.append("getitem" if getattr(t, "__name__", "") == "getitem" else str(t))
    return out


class CNN(nn.Module):
    """conv + bn + relu + pools + linear, with chunk/cat and a sum with dtype."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.ap = nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = self.ap(self.pool(y))
        y = torch.flatten(y, 1)
        a, b = y.chunk(2, dim=1)
        y = torch.cat([b, a], dim=1)
        return self.fc(y).log_softmax(-1), y.sum(dim=1, keepdim=True, dtype=torch.float64)


class Block(nn.Module):
    """A pre-norm transformer block with masked, causal and scaled attention."""

    def __init__(self, d=16, h=2):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        c = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
        a = (a + c).permute(0, 2, 1, 3).reshape(B, T, D)
        x = x + self.drop(self.proj(a))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return torch.softmax(x, dim=-1)


class Tied(nn.Module):
    """Weights that share storage: an output layer tied to the embedding, a
    parameter that is a slice of another, a transposed buffer view, a sliced
    buffer, a non-persistent buffer and a lifted tensor constant."""

    def __init__(self, vocab=20, d=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.big = nn.Parameter(torch.randn(2 * d, d) * 0.3)
        self.small = nn.Parameter(self.big.data[d:])  # shares big's storage, offset d*d
        base = torch.randn(2 * d, d) * 0.3
        self.register_buffer("proj_t", base.t())  # a transposed view: strides (1, d)
        self.register_buffer("proj_half", base[d:])  # a slice with an offset
        self.register_buffer("scale", torch.linspace(0.5, 1.5, d), persistent=False)

    def forward(self, ids):
        x = self.emb(ids) * self.scale
        y = (x @ self.proj_t) @ self.big
        y = y + x @ self.small.t() * torch.tensor([0.5]) + x @ self.proj_half.t()
        return self.head(y)


class Kwargs(nn.Module):
    """Operators with keyword arguments, in-place operators and small
    composites of the training IR."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3, padding="same")
        self.gn = nn.GroupNorm(2, 6)

    def forward(self, x, idx):
        y = self.gn(self.conv(x))  # conv1d(padding="same"), group_norm
        y = torch.div(y, 0.7, rounding_mode="floor") + torch.clamp(y, min=-0.5)
        y = y.relu_()
        y.add_(1.0, alpha=2.0)
        z = torch.cumsum(y, dim=-1, dtype=torch.float64).to(torch.float32)
        parts = torch.unbind(z, dim=1)
        s = torch.stack([parts[0], parts[-1]], dim=1)
        m = torch.full_like(s, 0.25) * torch.ones_like(s)
        s = s.masked_fill(s > 4.0, -1.0) + m
        p = F.pad(s, (1, 2), value=0.5)
        flat = p.flatten(1).unflatten(1, (2, -1))
        flat.mul_(1.5)  # in place on a view whose base is not read again
        w = torch.where(flat > 0, flat, torch.zeros_like(flat))
        e = torch.gather(w, 2, idx)
        return F.softmax(w, dim=-1, dtype=torch.float64), e.to(torch.float32), F.gelu(y, approximate="tanh")


class Counter(nn.Module):
    """Mutates a buffer in forward: the program has a buffer_mutation output."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return x + self.calls


class InplaceView(nn.Module):
    """Writes a view in place and then reads its base: the training IR keeps
    the aliasing, which the importer must refuse to rebind."""

    def forward(self, x):
        a = x * 1.0
        a[:, :2].relu_()
        return a + 1.0


class Interp(nn.Module):
    """Upsampling, which the IR lacks: the import must name it."""

    def forward(self, x):
        return F.interpolate(x, scale_factor=2.0, mode="nearest")


def strided_resnet18():
    """torchvision's resnet18 with every float parameter and buffer an
    overlapping strided view (stride 1 in every dim) of a small storage."""
    torch.manual_seed(1)
    r = torchvision.models.resnet18().eval()
    base = torch.randn(8192) * 0.05
    pos = torch.rand(8192) * 0.5 + 0.75
    for mod_name, mod in r.named_modules():
        for pn, p in list(mod.named_parameters(recurse=False)):
            off = (len(mod_name) * 131 + len(pn) * 17) % 1000
            v = torch.as_strided(base, p.shape, [1] * p.dim(), storage_offset=off)
            setattr(mod, pn, nn.Parameter(v, requires_grad=False))
        for bn, b in list(mod.named_buffers(recurse=False)):
            if b.dtype.is_floating_point:
                src = pos if "var" in bn else base
                mod._buffers[bn] = torch.as_strided(src, b.shape, [1] * b.dim(), storage_offset=7)
    return r


def main():
    torch.manual_seed(0)
    batch = Dim("batch", min=1, max=64)

    m = CNN().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 8, 8)
    ep = torch.export.export(m, (x,), dynamic_shapes={"x": {0: batch}})
    cases = [(torch.randn(1, 3, 8, 8),), (torch.randn(3, 3, 8, 8),)]
    save("cnn_train", ep, m, cases)
    save("cnn", ep.run_decompositions(), m, cases)

    torch.manual_seed(0)
    m = Block().eval()
    seq = Dim("seq", min=2, max=64)
    x, mask = torch.randn(2, 5, 16), torch.randn(5, 5)
    ep = torch.export.export(m, (x, mask), dynamic_shapes={"x": {0: batch, 1: seq}, "mask": {0: seq, 1: seq}})
    cases = [(torch.randn(1, 3, 16), torch.randn(3, 3)), (torch.randn(3, 7, 16), torch.randn(7, 7))]
    save("block_train", ep, m, cases)
    save("block", ep.run_decompositions(), m, cases, deflate=True)

    torch.manual_seed(0)
    m = Tied().eval()
    ids = torch.randint(0, 20, (2, 5))
    ep = torch.export.export(m, (ids,), dynamic_shapes={"ids": {0: batch, 1: seq}})
    cases = [(torch.randint(0, 20, (1, 4)),), (torch.randint(0, 20, (3, 6)),)]
    save("tied", ep, m, cases)

    torch.manual_seed(0)
    m = Kwargs().eval()
    x, idx = torch.randn(2, 4, 5), torch.randint(0, 4, (2, 2, 3))
    ep = torch.export.export(m, (x, idx), dynamic_shapes={"x": {0: batch}, "idx": {0: batch}})
    cases = [(torch.randn(1, 4, 5), torch.randint(0, 4, (1, 2, 3))), (torch.randn(3, 4, 5), torch.randint(0, 4, (3, 2, 3)))]
    save("kwargs_train", ep, m, cases)
    save("kwargs", ep.run_decompositions(), m, cases)

    m = InplaceView()
    ep = torch.export.export(m, (torch.randn(2, 4),))
    save("inplace_view_train", ep, m, [(torch.randn(2, 4),)])

    m = Interp().eval()
    ep = torch.export.export(m, (torch.randn(1, 2, 3, 3),)).run_decompositions()
    save("interp", ep, m, [(torch.randn(1, 2, 3, 3),)])

    m = Counter()
    ep = torch.export.export(m, (torch.randn(2),))
    save("mutation_train", ep, Counter(), [(torch.randn(2),)])
    save("mutation", ep.run_decompositions(), Counter(), [(torch.randn(2),)])

    r = strided_resnet18()
    x = torch.randn(2, 3, 32, 32)
    ep = torch.export.export(r, (x,), dynamic_shapes=({0: batch},)).run_decompositions()
    save("resnet18", ep, r, [(torch.randn(1, 3, 32, 32),), (torch.randn(2, 3, 32, 32),)], deflate=True)
    with open(os.path.join(HERE, "resnet18", "targets.txt"), "w") as f:
        f.write("\n".join(targets(ep)) + "\n")

    # A torch.save file: the pickled layout the importer must reject.
    torch.save(CNN().state_dict(), os.path.join(HERE, "pickled.pt"))


class Cond(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        def pos(x):
            return torch.relu(self.lin(x)) * 2.0

        def neg(x):
            return torch.tanh(self.lin(-x)) - 1.0

        return torch.cond(x.sum() > 0, pos, neg, (x,))


class WhileLoop(nn.Module):
    def forward(self, n, x):
        from torch._higher_order_ops.while_loop import while_loop

        def cond_fn(i, x):
            return i < n

        def body_fn(i, x):
            return i + 1, torch.sin(x) * 1.5 + 0.25

        _, y = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))
        return y


class Map(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, xs, bias):
        from torch._higher_order_ops.map import map as hop_map

        def body(x, b):
            return torch.relu(self.lin(x)) + b

        return hop_map(body, xs, bias)


class Float8(nn.Module):
    """Weights stored as float8_e4m3fn, dequantized in the graph; the result
    is also returned as float8_e5m2."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randn(4, 3).to(torch.float8_e4m3fn))
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x):
        y = x @ (self.w.to(torch.float32) * self.scale)
        return y, y.to(torch.float8_e5m2)


def float8_fixture():
    """float8/: the ml_dtypes .npy convention for its float8 output (NumPy
    has no float8 dtype of its own)."""
    torch.manual_seed(0)
    m = Float8().eval()
    batch = Dim("batch", min=1, max=64)
    ep = torch.export.export(m, (torch.randn(2, 4),), dynamic_shapes={"x": {0: batch}}).run_decompositions()
    save("float8", ep, m, [(torch.randn(1, 4),), (torch.randn(3, 4) * 100,)])


def map_fixture():
    torch.manual_seed(0)
    m = Map().eval()
    ep = torch.export.export(m, (torch.randn(5, 2, 4), torch.randn(3))).run_decompositions()
    save("map", ep, m, [(torch.randn(5, 2, 4), torch.randn(3)), (torch.randn(5, 2, 4), torch.randn(3))])


def cond_fixture():
    torch.manual_seed(0)
    m = Cond().eval()
    batch = Dim("batch", min=1, max=64)
    ep = torch.export.export(m, (torch.randn(2, 4),), dynamic_shapes={"x": {0: batch}}).run_decompositions()
    save("cond", ep, m, [(torch.rand(3, 4),), (-torch.rand(2, 4),)])

    m = WhileLoop()
    ep = torch.export.export(m, (torch.tensor(3), torch.randn(2, 4))).run_decompositions()
    save("while_loop", ep, m, [(torch.tensor(5), torch.randn(2, 4)), (torch.tensor(0), torch.randn(2, 4))])


if __name__ == "__main__":
    if sys.argv[1:] == ["cond"]:
        cond_fixture()
    elif sys.argv[1:] == ["map"]:
        map_fixture()
    elif sys.argv[1:] == ["float8"]:
        float8_fixture()
    else:
        main()
        cond_fixture()
        map_fixture()
        float8_fixture()
