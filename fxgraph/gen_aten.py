"""Writes aten_gen.go: one fxgraph.Op value per ATen operator overload, with
torch's argument schema (names, positions, kinds, defaults), taken from the
operator schemas of the installed torch. The IR's shape rules, folding and
lowering rules attach to these values; the .pt2 importer reads the schemas
to place arguments given by keyword.

Run from the repository root with the zoo venv (make aten-ops):

    .venv-zoo/bin/python fxgraph/gen_aten.py > fxgraph/aten_gen.go
    gofmt -w fxgraph/aten_gen.go

The table covers every overload of the operators that have an overload
tagged core, and the training-IR operators the importers decompose or the
IR defines (EXTRA below).
"""

import json
import math
import sys

import torch

# Operators that are not tagged core but appear in torch.export graphs and
# that the IR or the importers handle.
EXTRA = """
linear matmul sym_size sym_numel sym_stride numel _shape_as_tensor alias lift_fresh_copy
_unsafe_view reshape t cumprod grid_sampler_2d linalg_vector_norm logsumexp mish
pixel_unshuffle nll_loss_forward nll_loss2d_forward threshold std var elu
conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d _convolution
batch_norm layer_norm group_norm instance_norm scaled_dot_product_attention
dropout feature_dropout alpha_dropout feature_alpha_dropout native_dropout
flatten unflatten softmax log_softmax max_pool1d max_pool2d max_pool3d
adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool2d
chunk unbind contiguous to type_as detach clone embedding full_like zeros_like
ones_like empty_like scalar_tensor zeros ones empty new_zeros new_ones new_full new_empty
expand_as view_as reshape_as masked_fill pad silu hardswish hardsigmoid relu6 gelu
mean sum split split_with_sizes _assert_scalar _assert_tensor_metadata
sym_constrain_range sym_constrain_range_for_size _assert_async select slice index
unsqueeze squeeze permute transpose view expand cat stack mm bmm addmm
all arange bitwise_left_shift bitwise_right_shift exp2 isfinite max min
max_pool1d_with_indices pixel_shuffle replication_pad1d rsub softplus tril triu where
clamp_min clamp_max baddbmm roll zero fill copy slice_scatter as_strided
__and__ __or__ __xor__ __lshift__ __rshift__ __iand__ __ior__ __ixor__ __ilshift__ __irshift__
swapaxes swapdims movedim moveaxis diff _weight_norm _weight_norm_interface einsum
adaptive_max_pool1d adaptive_max_pool3d _adaptive_avg_pool3d upsample_nearest1d upsample_nearest2d
upsample_nearest3d _upsample_nearest_exact1d _upsample_nearest_exact2d _upsample_nearest_exact3d
upsample_linear1d upsample_bilinear2d upsample_trilinear3d upsample_bicubic2d tensor_split
square erfc sgn special_expm1 clip numpy_T frac log_sigmoid selu celu hardshrink logit addcmul addcdiv
lerp outer hypot logaddexp xlogy floor_divide isclose glu prelu rms_norm var_mean std_mean narrow tile
repeat_interleave one_hot cosine_similarity count_nonzero aminmax argsort scatter_add mse_loss
broadcast_tensors hsplit vsplit meshgrid atleast_1d atleast_2d atleast_3d nan_to_num take_along_dim
tensordot inner cdist pairwise_distance dist diagonal trace unfold rot90 addmv copysign
logcumsumexp diag_embed index_add lstm gru rnn_tanh rnn_relu
""".split()

# The Go ArgKind of each schema type (str(torch type)); others are ArgAny.
KINDS = {
    "Tensor": "ArgTensor", "Optional[Tensor]": "ArgTensor",
    "int": "ArgInt", "SymInt": "ArgInt", "Optional[int]": "ArgInt", "Optional[SymInt]": "ArgInt",
    "float": "ArgFloat", "Optional[float]": "ArgFloat",
    "bool": "ArgBool", "Optional[bool]": "ArgBool",
    "List[int]": "ArgInts", "List[SymInt]": "ArgInts", "Optional[List[int]]": "ArgInts",
    "Optional[List[SymInt]]": "ArgInts",
}


def go_literal(v):
    """Returns the Go literal of a schema default ("nil" for None and for
    dtypes, layouts, memory formats and devices, which carry nothing for the
    IR)."""
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return "int64(%d)" % v
    if isinstance(v, float):
        if math.isinf(v):
            return "math.Inf(%d)" % (1 if v > 0 else -1)
        if math.isnan(v):
            return "math.NaN()"
        return "float64(%r)" % v
    if isinstance(v, str):
        return '"%s"' % v.replace("\\", "\\\\").replace('"', '\\"')
    if isinstance(v, (list, tuple)):
        return "[]any{" + ", ".join(go_literal(e) for e in v) + "}"
    return "nil"


def camel(s):
    return "".join(p[:1].upper() + p[1:] for p in s.split("_") if p)


def go_names(targets):
    """Maps each target to its Go name: "Aten" and the operator and overload
    in camel case, .default adding nothing (aten.add.Tensor: AtenAddTensor,
    aten.relu.default: AtenRelu); an operator torch marks private with a
    leading "_" keeps it as "Aten_" (aten._softmax.default: Aten_Softmax)."""
    names = {}
    for t in targets:
        _, op, ov = t.split(".")
        prefix = "Aten_" if op.startswith("_") and not op.startswith("__") else "Aten"
        names[t] = prefix + camel(op) + ("" if ov == "default" else camel(ov))
    if len(set(names.values())) != len(names):
        sys.exit("gen_aten: Go names collide")
    return names


def overloads():
    """Yields (target, schema) of every overload the table covers."""
    all_ops = set(dir(torch.ops.aten)) | set(EXTRA)
    all_ops |= {n.split("::", 1)[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")}
    for opname in sorted(all_ops):
        try:
            op = getattr(torch.ops.aten, opname)
        except Exception:
            continue
        if not hasattr(op, "overloads"):
            continue
        ovs = []
        for ov in op.overloads():
            try:
                ovs.append((ov, getattr(op, ov)))
            except Exception:
                continue
        # Every overload of an operator with a core overload (where.self is
        # core, where.ScalarOther is not, and the IR has both).
        if opname not in EXTRA and not any(torch.Tag.core in o.tags for _, o in ovs):
            continue
        for ov, o in ovs:
            # out= variants write into a given tensor: never in exports.
            if ov == "out" or ov.endswith("_out") or "out" in [a.name for a in o._schema.arguments if a.kwarg_only]:
                continue
            if opname.endswith("_backward") and opname not in EXTRA:
                continue
            yield "aten.%s.%s" % (opname, ov), o._schema


def main():
    ops = dict(overloads())
    names = go_names(ops)
    lines = []
    for target in sorted(ops):
        schema = ops[target]
        args = []
        for i, a in enumerate(schema.arguments):
            has_def = a.has_default_value()
            d = go_literal(a.default_value) if has_def else "nil"
            pos = "KwOnly" if a.kwarg_only else str(i)
            kind = KINDS.get(str(a.type), "ArgAny")
            args.append("{%s, %s, %s, %s, %s}" % (json.dumps(a.name), pos, kind, d, "true" if has_def else "false"))
        sig = str(schema).replace("\n", " ")
        lines.append("\t// %s is %s.\n\t%s = &Op{Name: %s, Args: []ArgSpec{%s}}\n" % (
            names[target], sig, names[target], json.dumps(target), ", ".join(args)))
    body = "".join(lines)
    out = sys.stdout
    out.write("// Code generated by gen_aten.py from torch %s; DO NOT EDIT.\n\n" % torch.__version__)
    out.write("package fxgraph\n\n")
    if "math." in body:
        out.write("import \"math\"\n\n")
    out.write("// The ATen operators, one value per overload, with torch's schema.\n")
    out.write("var (\n")
    out.write(body)
    out.write(")\n\n")
    out.write("// atenOps lists the generated operators, sorted by name.\n")
    out.write("var atenOps = []*Op{\n")
    for target in sorted(ops):
        out.write("\t%s,\n" % names[target])
    out.write("}\n")


if __name__ == "__main__":
    main()
