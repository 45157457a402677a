"""Generates importer/onnx/testdata/ort/optim_<case>/: models of the
ai.onnx.preview.training operators (Adagrad, Adam, Momentum, Gradient),
laid out like the ONNX backend test data, whose expected outputs are one
step of the matching torch.optim optimizer, or torch.autograd's gradients
(ONNX Runtime's CPU build has no training operators). The ONNX step count T maps to torch's per-parameter state
"step" (Adagrad, SGD: T; Adam: T-1, as torch increments it first).

Pinned: onnx 1.19.1, torch 2.14.1, numpy (.venv-zoo). Run from the
repository root (make ort-cases):

	.venv-zoo/bin/python importer/onnx/testdata/gen_torch_optim_cases.py
"""
import os
import shutil

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

ROOT = "importer/onnx/testdata/ort"
F = TensorProto.FLOAT
DOMAIN = "ai.onnx.preview.training"
rng = np.random.default_rng(11)


def write(d, name, arrays):
    for i, a in enumerate(arrays):
        with open(os.path.join(d, "test_data_set_0", f"{name}_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(a)).SerializeToString())


def case(name, op, attrs, groups, outs, r, t, expected):
    """groups: lists of per-tensor arrays (X..., G..., ...); outs: output group names."""
    n = len(groups[0])
    in_names = ["R", "T"] + [f"in{k}_{i}" for k in range(len(groups)) for i in range(n)]
    out_names = [f"{o}{i}_new" for o in outs for i in range(n)]
    flat = [a for g in groups for a in g]
    inputs = [helper.make_tensor_value_info("R", F, []), helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    inputs += [helper.make_tensor_value_info(nm, F, list(a.shape)) for nm, a in zip(in_names[2:], flat)]
    outputs = [helper.make_tensor_value_info(nm, F, list(a.shape)) for nm, a in zip(out_names, expected)]
    node = helper.make_node(op, in_names, out_names, domain=DOMAIN, **attrs)
    graph = helper.make_graph([node], name, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(DOMAIN, 1)], ir_version=8)
    d = os.path.join(ROOT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    write(d, "input", [np.array(r, np.float32), np.array(t, np.int64)] + flat)
    write(d, "output", expected)


def step(opt_cls, kwargs, x, g, state):
    p = torch.nn.Parameter(torch.tensor(x))
    opt = opt_cls([p], **kwargs)
    p.grad = torch.tensor(g)
    if state:
        opt.state[p].update({k: (torch.tensor(v) if not isinstance(v, (int, float)) else torch.tensor(float(v))) for k, v in state.items()})
    opt.step()
    return p.detach().numpy(), opt.state[p]


def adagrad(name, r, t, decay, norm, eps, shapes):
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    gs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    hs = [rng.uniform(0.1, 2, s).astype(np.float32) for s in shapes]
    nx, nh = [], []
    for x, g, h in zip(xs, gs, hs):
        px, st = step(torch.optim.Adagrad, dict(lr=r, lr_decay=decay, weight_decay=norm, eps=eps), x, g, {"step": t, "sum": h})
        nx.append(px)
        nh.append(st["sum"].numpy())
    case(name, "Adagrad", dict(decay_factor=decay, norm_coefficient=norm, epsilon=eps), [xs, gs, hs], ["X", "H"], r, t, nx + nh)


def momentum(name, r, t, alpha, beta, norm, nesterov, shapes):
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    gs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    vs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    nx, nv = [], []
    for x, g, v in zip(xs, gs, vs):
        px, st = step(torch.optim.SGD, dict(lr=r, momentum=alpha, dampening=1 - beta, weight_decay=norm, nesterov=nesterov), x, g, {"momentum_buffer": v})
        nx.append(px)
        nv.append(st["momentum_buffer"].numpy())
    mode = "nesterov" if nesterov else "standard"
    case(name, "Momentum", dict(alpha=alpha, beta=beta, norm_coefficient=norm, mode=mode), [xs, gs, vs], ["X", "V"], r, t, nx + nv)


def adam(name, r, t, alpha, beta, norm, eps, shapes):
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    gs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    vs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    hs = [rng.uniform(0.1, 2, s).astype(np.float32) for s in shapes]
    nx, nv, nh = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        px, st = step(torch.optim.Adam, dict(lr=r, betas=(alpha, beta), eps=eps, weight_decay=norm), x, g,
                      {"step": t - 1, "exp_avg": v, "exp_avg_sq": h})
        nx.append(px)
        nv.append(st["exp_avg"].numpy())
        nh.append(st["exp_avg_sq"].numpy())
    case(name, "Adam", dict(alpha=alpha, beta=beta, norm_coefficient=norm, epsilon=eps), [xs, gs, vs, hs], ["X", "V", "H"], r, t, nx + nv + nh)


def gradient(name, xs_spec, nodes, y, ref):
    """xs_spec: (name, shape) of the graph inputs; nodes: (op, inputs, output); ref: torch function of the inputs giving y."""
    vals = [rng.uniform(0.5, 2, s).astype(np.float32) for _, s in xs_spec]
    ts = [torch.tensor(v, requires_grad=True) for v in vals]
    out = ref(*ts)
    out.sum().backward()
    names = [n for n, _ in xs_spec]
    gnode = helper.make_node("Gradient", names, [f"d_{n}" for n in names], domain=DOMAIN, xs=names, y=y)
    graph = helper.make_graph([helper.make_node(op, ins, [o]) for op, ins, o in nodes] + [gnode], name,
                              [helper.make_tensor_value_info(n, F, list(s)) for n, s in xs_spec],
                              [helper.make_tensor_value_info(y, F, list(out.shape))] + [helper.make_tensor_value_info(f"d_{n}", F, list(s)) for n, s in xs_spec],
                              initializer=[numpy_helper.from_array(np.array(3, np.float32), "three")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(DOMAIN, 1)], ir_version=8)
    d = os.path.join(ROOT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    write(d, "input", vals)
    write(d, "output", [out.detach().numpy()] + [t.grad.numpy() for t in ts])


if __name__ == "__main__":
    for d in os.listdir(ROOT) if os.path.isdir(ROOT) else []:
        if d.startswith("optim_"):
            shutil.rmtree(os.path.join(ROOT, d))
    adagrad("optim_adagrad_t0", 0.1, 0, 0.1, 0.01, 1e-5, [(3,)])
    adagrad("optim_adagrad_t5_two", 0.05, 5, 0.2, 0.0, 1e-6, [(2, 3), (4,)])
    momentum("optim_momentum_t3_two", 0.1, 3, 0.9, 0.7, 0.01, False, [(3,), (2, 2)])
    momentum("optim_nesterov_t2", 0.2, 2, 0.8, 1.0, 0.001, True, [(5,)])
    adam("optim_adam_t1", 0.01, 1, 0.9, 0.999, 0.0, 1e-8, [(4,)])
    adam("optim_adam_t7_two", 0.02, 7, 0.8, 0.95, 0.01, 1e-8, [(3,), (2, 2)])
    # y = -((a*b + c) / (a - b + 3)), b and c broadcast; a used three times.
    gradient("optim_gradient_broadcast", [("a", (2, 3)), ("b", (3,)), ("c", ())],
             [("Mul", ["a", "b"], "ab"), ("Add", ["ab", "c"], "num"), ("Sub", ["a", "b"], "d0"), ("Add", ["d0", "three"], "den"),
              ("Div", ["num", "den"], "q"), ("Identity", ["q"], "qi"), ("Neg", ["qi"], "y")], "y",
             lambda a, b, c: -((a * b + c) / (a - b + 3)))
