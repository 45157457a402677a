"""Exports the fixtures of the fx importer's ATen-surface decompositions
(decompose_ops.go, decompose_resample.go): one small module per operator
family, exported with plain torch.export.export (NOT run_decompositions, so
the archive holds the operator as users save it) with a dynamic batch.

Run from the repository root with the zoo venv (torch 2.14.1):

    .venv-zoo/bin/python importer/fx/testdata/make_aten_fixtures.py [CASE ...]

With case names, only those cases are (re)written.

Each case is a folder importer/fx/testdata/aten/<name>/ holding model.pt2,
ops.txt (the call_function targets of the exported graph, which the Go test
checks hold the operator under test) and, for batch 2 and batch 3,
in<k>_<i>.npy and out<k>_<j>.npy: the inputs and torch eager's outputs.
"""

import os
import shutil
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "aten")
Dim = torch.export.Dim


class Fn(nn.Module):
    """Wraps a function of the inputs as a module."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *xs):
        return self.f(*xs)


def randn(*shape):
    return lambda b: torch.randn(b, *shape)


def fixed(*shape):
    """An input without a batch dim (static shape)."""
    f = lambda b: torch.randn(*shape)  # noqa: E731
    f.static = True
    return f


def randint(lo, hi, *shape):
    return lambda b: torch.randint(lo, hi, (b,) + shape)


def inplace(x):
    y = x.clone()
    y.add_(1.5)
    y.mul_(2)
    y.relu_()
    z = torch.empty_like(x).fill_(0.25)
    z.sub_(x)
    y.clamp_(max=3.0)
    return y, z.sigmoid_()


def iand(a, b):
    c = a.clone()
    c &= b
    c |= 8
    c ^= a
    return c


def view_write(x):
    # x[:, :2].relu_() and swin's attention mask: fill_ of slices of a
    # fresh tensor, then the tensor is read.
    a = x * 1.0
    a[:, :2].relu_()
    m = x.new_zeros((1, 6, 5))
    cnt = 0
    for h in (slice(0, -3), slice(-3, -1), slice(-1, None)):
        for w in (slice(0, 2), slice(2, None)):
            m[:, h, w] = cnt
            cnt += 1
    a[:, 1].zero_()
    return a + 1.0, m.expand(x.shape[0], 6, 5) * x[:, :1, :1]


def view_sibling(x):
    # b is written in place while c, a view of the same memory taken
    # before the write, is read after it: the importer must refuse.
    a = x * 1.0
    b = a[:, :2]
    c = a[:, 1:3]
    b.relu_()
    return c + 1.0


def pointwise(x, y):
    return (torch.square(x), torch.erfc(x), torch.sgn(x), torch.special.expm1(x), torch.clip(x, -0.5, 0.5), torch.frac(x * 3),
            F.logsigmoid(x * 20), F.selu(x), F.celu(x, 0.5), F.hardshrink(x), torch.logit(x.sigmoid(), 1e-3),
            torch.addcmul(x, x, y, value=0.5), torch.addcdiv(x, x, y.abs() + 1, value=2), torch.lerp(x, y, 0.3),
            torch.lerp(x, y, y.sigmoid()), torch.hypot(x, y), torch.logaddexp(x * 50, y), torch.xlogy(x.relu(), y.abs()),
            x // 0.3, torch.floor_divide(x, y.abs() + 0.5), torch.isclose(x, (x * 1e6).round() / 1e6 + (y > 1) * 1e-3),
            torch.max(x, y), torch.min(x, y))


def reductions(x, y):
    a = x.reshape(x.shape[0], 3, 4)
    return (F.glu(x, -1), F.prelu(a, torch.tensor([0.1, 0.2, 0.3])), F.prelu(x, torch.tensor([0.25])), F.rms_norm(x, (12,), torch.arange(12.0)),
            F.rms_norm(a, (3, 4), eps=1e-3), torch.std(x, 1), torch.var(x, 1, unbiased=False, keepdim=True), torch.var_mean(x, 1)[0],
            torch.std_mean(x, 1, correction=0)[1], torch.outer(x[0], y[0]), x.narrow(1, 1, 2), torch.tile(x, (2,)), torch.tile(a, (1, 2, 1, 1)),
            torch.repeat_interleave(a, 2, dim=1), F.one_hot(x.argmax(-1), 12), F.instance_norm(a), F.cosine_similarity(x, y),
            torch.count_nonzero(x > 0, dim=1), torch.aminmax(x, dim=1)[1], torch.argsort(x, 1, descending=True),
            torch.zeros(x.shape[0], 4).scatter_add(1, (x.abs() * 3).long() % 4, y), F.mse_loss(x, y), F.mse_loss(x, y[:1].expand(x.shape[0], 12), reduction="none"),
            torch.tensor_split(x, (1, 3), dim=1)[1], torch.tensor_split(x, 3, dim=1)[2], x.T if x.dim() == 2 else x)


def shapes(x, y):
    a = x.reshape(x.shape[0], 3, 4)
    b = y.reshape(y.shape[0], 3, 4)
    g = torch.meshgrid(x[0, :3], y[0, :5], indexing="xy")
    return (torch.hsplit(a, 3)[1], torch.hsplit(a, [1])[1], torch.vsplit(a[0], [1])[1], torch.hsplit(x[0], 3)[2], g[0], g[1], torch.meshgrid(x[0, :2], y[0, :3], indexing="ij")[1],
            torch.atleast_3d(x[0]), torch.atleast_2d(x[0, 0]), torch.nan_to_num(torch.log(x)), torch.nan_to_num(x / 0, nan=1.0, posinf=5.0),
            torch.take_along_dim(a[0], a[0].argsort(1), 1), torch.take_along_dim(a[0], a[0, :1].argmax(1, keepdim=True)), torch.tensordot(a, b, dims=([2], [2])), torch.inner(a, b), torch.cdist(a, b),
            torch.cdist(a, b, p=1), F.pairwise_distance(x, y), torch.dist(x, y), torch.diagonal(a, 1, 1, 2), torch.trace(a[0]),
            a.unfold(2, 2, 1), a.unfold(1, 2, 2), torch.rot90(a, 1, (1, 2)), torch.rot90(a, 2, (1, 2)), torch.rot90(a, -1, (1, 2)),
            torch.addmv(x[0, :3], a[0], y[0, :4], beta=0.5, alpha=2), torch.copysign(x, y), torch.copysign(x, -0.0 * y))


class WeightNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.utils.weight_norm(nn.Linear(6, 4))
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(3, 5, 3), dim=0)
        self.all = nn.utils.weight_norm(nn.Linear(6, 2), dim=None)

    def forward(self, x, s):
        return self.lin(x), self.conv(s), self.all(x)


class WrappedRegions(nn.Module):
    """A no_grad region and a disabled autocast region, as Hugging Face's
    rotary embeddings have: torch.export keeps each as a subgraph called by
    a wrapping higher-order operator."""

    def __init__(self):
        super().__init__()
        self.register_buffer("freq", torch.arange(1, 5, dtype=torch.float32))

    def forward(self, x):
        with torch.no_grad():
            f = x[:, :1] * self.freq
            c, s = f.cos(), f.sin()
        with torch.autocast("cpu", enabled=False):
            y = (c * 2).float()
        return x + c, s * x, y


# WeightNorm's parameters are drawn when CASES is built: seed first, so
# that the fixtures are reproducible.
torch.manual_seed(0)

# name: (module, input makers, the operator the export must hold)
CASES = {
    "bitwise": (Fn(lambda x, y: (((x > 0) & (y > 0)) | (x > 1), (x > 0) ^ (y < 0))),
                [randn(3, 4), randn(3, 4)], "aten.__and__.Tensor"),
    "bitwise_scalar": (Fn(lambda a: ((a & 6) | 1, a ^ 5, a << 2, a >> 1)), [randint(0, 100, 5)], "aten.__and__.Scalar"),
    "bitwise_inplace": (Fn(iand), [randint(0, 100, 5), randint(0, 100, 5)], "aten.__iand__.Tensor"),
    "inplace": (Fn(inplace), [randn(3, 4)], "aten.fill_.Scalar"),
    "diff": (Fn(lambda x, p: (torch.diff(x, dim=1), torch.diff(x, n=2, dim=-1, prepend=p), torch.diff(x > 0, dim=2))),
             [randn(4, 5), randn(4, 2)], "aten.diff.default"),
    "view_write": (Fn(view_write), [randn(4, 5)], "aten.fill_.Tensor"),
    "view_sibling": (Fn(view_sibling), [randn(4)], "aten.relu_.default"),
    "pointwise": (Fn(pointwise), [randn(4), randn(4)], "aten.logaddexp.default"),
    "reductions": (Fn(reductions), [randn(12), randn(12)], "aten.rms_norm.default"),
    "shapes": (Fn(shapes), [randn(12), randn(12)], "aten.meshgrid.indexing"),
    # repeat by the batch size (a symbolic size, as DETR's and Whisper's).
    "repeat": (Fn(lambda x, q: (q.unsqueeze(0).repeat(x.shape[0], 1, 1) + x[:, :3].unsqueeze(-1), x.repeat(2, 1), x[:, 0].repeat(x.shape[0]))),
               [randn(4), fixed(3, 2)], "aten.repeat.default"),
    "cumulative": (Fn(lambda x, y: (torch.logcumsumexp(x * 30, 1), torch.diag_embed(x), x.index_add(1, torch.tensor([0, 2, 0]), y[:, :3], alpha=2),
                                    x.index_add(0, torch.zeros(x.shape[0], dtype=torch.long), y))),
                   [randn(5), randn(5)], "aten.logcumsumexp.default"),
    "weight_norm": (WeightNorm(), [randn(6), randn(3, 9)], "aten._weight_norm.default"),
    "swap": (Fn(lambda x: (x.swapaxes(1, 2), x.swapdims(0, 2), torch.movedim(x, 1, -1), torch.moveaxis(x, (0, 1), (2, 0)))),
             [randn(3, 4)], "aten.swapaxes.default"),
    "einsum": (Fn(lambda q, k, v: (torch.einsum("bhid,bhjd->bhij", q, k), torch.einsum("bij,bjk->bik", q[:, 0], v[:, 0].transpose(1, 2)),
                                  torch.einsum("...ij->...ji", q), torch.einsum("bhid,bhid", q, q), torch.einsum("bhi,bhj,bhk->bijk", q[..., 0], k[..., 0], v[..., 1]),
                                  torch.einsum("bhid,d->bhi", q, v[0, 0, 0]))),
               [randn(2, 5, 4), randn(2, 6, 4), randn(2, 6, 4)], "aten.einsum.default"),
    "adaptive_avg_pool3d": (Fn(lambda x: (F.adaptive_avg_pool3d(x, (2, 3, 4)), F.adaptive_avg_pool3d(x, 1), F.adaptive_avg_pool3d(x, (5, 3, 7)))),
                            [randn(2, 5, 6, 7)], "aten.adaptive_avg_pool3d.default"),
    "adaptive_max_pool": (Fn(lambda x: (F.adaptive_max_pool2d(x, (3, 4)), F.adaptive_max_pool2d(x, 1), F.adaptive_max_pool1d(x[:, :, 0], 4),
                                        F.adaptive_max_pool3d(x.unsqueeze(2), (1, 2, 3)))),
                          [randn(2, 7, 9)], "aten.adaptive_max_pool2d.default"),
    "upsample_nearest": (Fn(lambda x: (F.interpolate(x, scale_factor=2.0, mode="nearest"), F.interpolate(x, size=(5, 7), mode="nearest"),
                                       F.interpolate(x, scale_factor=(1.5, 0.75), mode="nearest"), F.interpolate(x, size=(7, 3), mode="nearest-exact"),
                                       F.interpolate(x[:, :, 0], size=9, mode="nearest"), F.interpolate(x.unsqueeze(2), scale_factor=(2, 1, 2), mode="nearest"))),
                         [randn(2, 4, 6)], "aten.upsample_nearest2d.vec"),
    "upsample_linear": (Fn(lambda x: (F.interpolate(x, scale_factor=2.0, mode="bilinear"), F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True),
                                      F.interpolate(x, size=(3, 5), mode="bilinear"), F.interpolate(x, scale_factor=1.7, mode="bilinear"),
                                      F.interpolate(x[:, :, 0], size=11, mode="linear"),
                                      F.interpolate(x.unsqueeze(2), size=(2, 5, 9), mode="trilinear", align_corners=False))),
                        [randn(2, 4, 6)], "aten.upsample_bilinear2d.vec"),
    "wrapped_regions": (WrappedRegions(), [randn(4)], "higher_order.wrap_with_set_grad_enabled"),
    "upsample_bicubic": (Fn(lambda x: (F.interpolate(x, scale_factor=2.0, mode="bicubic"), F.interpolate(x, size=(7, 5), mode="bicubic", align_corners=True))),
                         [randn(2, 4, 6)], "aten.upsample_bicubic2d.vec"),
}


def targets(ep):
    out = set()
    for n in ep.graph.nodes:
        if n.op == "call_function":
            t = n.target
            out.add("higher_order." + t.__name__ if isinstance(t, torch._ops.HigherOrderOperator) else str(t))
    return sorted(out)


def main():
    only = sys.argv[1:]
    if not only:
        shutil.rmtree(HERE, ignore_errors=True)
    for name, (model, makers, op) in CASES.items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        model.eval()
        ex = tuple(m(2) for m in makers)
        per = tuple(None if getattr(m, "static", False) else {0: Dim("batch", min=1, max=64)} for m in makers)
        dyn = {"xs": per} if isinstance(model, Fn) else per
        if isinstance(model, WeightNorm):
            dyn = None  # its two inputs have batches of their own
        ep = torch.export.export(model, ex, dynamic_shapes=dyn)
        ops = targets(ep)
        if op not in ops:
            raise SystemExit("%s: the export holds %s, not %s" % (name, ops, op))
        d = os.path.join(HERE, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        torch.export.save(ep, os.path.join(d, "model.pt2"))
        with open(os.path.join(d, "ops.txt"), "w") as f:
            f.write("\n".join(ops) + "\n")
        for k, b in enumerate((2, 3) if dyn is not None else (2,)):
            torch.manual_seed(k + 1)
            xs = tuple(m(b) for m in makers)
            with torch.no_grad():
                ys = model(*xs)
            if isinstance(ys, torch.Tensor):
                ys = (ys,)
            for i, x in enumerate(xs):
                np.save(os.path.join(d, "in%d_%d.npy" % (k, i)), x.numpy().copy(order="C"))
            for j, y in enumerate(ys):
                np.save(os.path.join(d, "out%d_%d.npy" % (k, j)), y.detach().numpy().copy(order="C"))
        print(name, os.path.getsize(os.path.join(d, "model.pt2")), [o for o in ops if o not in ("aten.slice.Tensor",)])


if __name__ == "__main__":
    main()
