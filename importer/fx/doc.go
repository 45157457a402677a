// Package fx imports PyTorch torch.export archives (.pt2 files written by
// torch.export.save) into the xserve IR (fxgraph).
//
// # Archive
//
// A .pt2 archive is a zip whose root folder holds archive_format ("pt2"),
// archive_version, byteorder, models/<name>.json (the ExportedProgram in
// the JSON form of torch/_export/serde/schema.py), data/weights/ and
// data/constants/ (raw storage bytes, described by
// <name>_weights_config.json and <name>_constants_config.json), and
// optional pickled sample inputs, which the importer ignores. Archives
// without the root folder (written before it was added in torch 2.8) are
// read too. The zip is read with archive/zip; nothing is extracted to disk.
//
// Every size is checked before it is trusted: the JSON entries are capped
// (256 MiB for the program, 64 MiB for each config), an entry's bytes must
// match its zip header (a DEFLATE entry may not claim more than DEFLATE can
// expand to), buffers grow only as bytes arrive, every tensor's byte range
// is checked against its storage, and the tensors built from storages may
// take at most 256 MiB plus 16 times the storage bytes. A corrupt or hostile
// archive gives an error wrapping ErrFormat, never a panic (the package is
// fuzzed).
//
// # Versions
//
// The program JSON must have schema major version 8, which every torch that
// writes the pt2 archive layout (torch 2.8 and later, 2.14 at least) writes.
// Verified: archives written by torch 2.14.1 (schema 8.20), with
// and without ep.run_decompositions(), for the fixtures in testdata and for
// torchvision's resnet18, mobilenet_v3_small, efficientnet_b0, densenet121,
// shufflenet_v2, squeezenet, regnet_y_400mf, convnext_tiny, swin_t, a small
// VisionTransformer and nn.TransformerEncoderLayer/nn.MultiheadAttention
// (all run on XLA and match eager PyTorch). Other torch versions that write
// this layout with schema major 8 are expected to load but were not tested.
// Weights must be raw bytes (use_pickle false, as torch 2.14 writes them).
// The layouts that keep tensors in pickles are rejected with "pickled state
// dicts are not supported; re-export with torch.export.save": a weights
// file data/weights/<name>.pt, pickled tensor subclasses, the zip of
// serialized_exported_program.json and serialized_state_dict.pt that
// torch.export.save wrote before the pt2 layout (schema major 7 and
// earlier: so no earlier major of the pt2 layout exists to accept), and
// torch.save files (data.pkl). Another schema major is an error naming the
// version and the torch that wrote it.
//
// # Mapping
//
// The graph signature decides what each graph input is: user inputs become
// placeholders named as in torch (x, input_ids), parameters, buffers
// (persistent ones from the weights, non-persistent ones from the
// constants) and lifted tensor constants become get_attr nodes keyed by
// their fully qualified names (conv.weight). Weights that are views of a
// shared storage (tied or sliced parameters, expanded buffers) are
// materialized with their sizes, strides and storage offset into
// contiguous tensors. Symbolic sizes become IR symbols; torch.export does
// not save the names given to torch.export.Dim, so they keep torch's names
// (s0, s77), and range_constraints become Graph.SymbolRanges (an open bound,
// null or int_oo, is no bound). An input dim that is an expression of
// symbols (sympy Add, Mul, FloorDiv, Mod of symbols and integers: a cached
// decoder's attention mask is past + 1) becomes a derived symbol named by
// its text ("s20 + 1") with its expression in Graph.SymbolExprs: callers
// bind the plain symbols from the other inputs and check it against them
// (Graph.BindDims, serving's bucket plan). Only user outputs are returned, under their
// torch value names; a program that mutates a buffer, a parameter or an
// input (buffer_mutation outputs: a model exported in training mode, a
// cache) is rejected, since a served program must not carry state between
// requests.
//
// A call_function node "torch.ops.aten.X.overload" becomes the IR node
// "aten.X.overload". Its arguments are placed by the ATen schema of the
// operator (fxgraph.OpByName: the op values generated from torch 2.14.1):
// keyword-only arguments go to Kwargs, the others to their position, and
// memory formats, layouts and devices become nil. Operators with several
// outputs become a tuple node and getitem nodes for the outputs that are
// used. In-place variants (relu_, add_, which the training IR keeps) are
// converted as their functional form and the written name is rebound to
// the result (and written back into the base of a slice/select view, see
// below); this is refused (with advice to run run_decompositions, which
// functionalizes the program) when another view of the written memory is
// read afterwards, and when the written tensor is a parameter or buffer.
// Operators on symbolic sizes (aten.sym_size.int, operator.mul on SymInts,
// ...) become IR operators on rank-0 int64 tensors, which specialization to
// a shape bucket folds to constants. Runtime assertions
// (aten._assert_scalar, ...) are dropped.
//
// torch.export's default (training) IR keeps composite operators the IR does
// not have, so the importer decomposes them into Core ATen operators itself:
// conv1d/2d/3d (also padding="same"/"valid") and conv_transpose1d/2d/3d to
// convolution; batch_norm (inference) to
// _native_batch_norm_legit_no_training; layer_norm and group_norm to their
// native forms; scaled_dot_product_attention (scale, attn_mask, is_causal,
// enable_gqa) to matmul, mul, _softmax and where; dropout (inference) to the
// identity; flatten, unflatten, view_as, reshape_as and expand_as to
// reshape and expand; softmax.int and log_softmax.int; max_pool2d/3d to
// the _with_indices forms; adaptive_avg_pool1d/2d; chunk, unbind and stack;
// to.dtype and type_as; embedding; full_like, zeros/ones/empty(_like),
// new_*, scalar_tensor, fill, zero, copy; masked_fill; pad; relu6;
// clamp_min/clamp_max; baddbmm; roll; slice_scatter (static dim, step 1);
// as_strided (the identity for the input's own layout, or a gather of
// constant offsets for static shapes). arange with symbolic bounds, which
// the IR's arange does not take, becomes cumsum over full.
//
// Archives saved without run_decompositions carry the full ATen surface;
// the importer decomposes it with one small rule per operator, as torch's
// own decomposition table does: Python's operator overloads (__and__,
// __or__, __xor__, __lshift__, __rshift__, their .Scalar forms and the
// augmented __iand__ ... as in-place variants) to the bitwise operators;
// swapaxes, swapdims, movedim, moveaxis, numpy_T, narrow, tile,
// tensor_split, repeat_interleave (int repeats) and broadcast_tensors to
// shape operators; diff; _weight_norm and _weight_norm_interface;
// einsum (operands contracted pairwise with bmm, as torch does; no
// diagonals); every upsample mode (nearest, nearest-exact, linear,
// bilinear, bicubic, trilinear; the .vec and .default overloads) and
// adaptive average and max pooling of any rank, for static spatial sizes,
// as per-dim "taps": gathers with constant indices and weights computed at
// import time with torch's index arithmetic (decompose_resample.go); and
// about forty pointwise and reduction operators written as formulas of IR
// operators (decompose_math.go: square, erfc, frac, log_sigmoid, selu,
// celu, logit, addcmul, addcdiv, lerp, outer, hypot, logaddexp, xlogy,
// floor_divide, isclose, glu, prelu, rms_norm, var/std with unbiased and
// their _mean forms, one_hot, instance_norm, cosine_similarity,
// count_nonzero, aminmax, argsort, scatter_add, mse_loss, ...).
// repeat with repeats computed from the input shape (x.repeat(batch, 1),
// which the IR's repeat refuses) becomes reshape, expand and reshape.
// fx.Supports reports whether a target converts at all. The survey of
// python/survey_aten.py (make aten-survey: 84 torchvision, timm and
// transformers models exported without run_decompositions) imports and
// runs every model it exports, matching torch eager at a batch other than
// the export example's.
//
// An in-place operator that writes a slice or select view of a tensor
// whose base is read later (x[:, a:b] = v, swin's attention mask) is
// written back into the base the way functionalization does: the view's
// new value is put into its base with a cat of the surrounding slices
// (static dims, step 1), for every step of the view chain. It is refused
// when a sibling view taken before the write is read after it. The IR's own
// operator of the same name always takes precedence. Any other operator the IR does
// not know is an error naming the operator, the node and the nearest known
// targets, wrapping ErrUnsupported.
//
// The higher-order operators torch.ops.higher_order.cond and while_loop
// become the IR's cond and while_loop (fxgraph.Cond, fxgraph.WhileLoop),
// each "as_graph" argument converted into a subgraph of its own.
// torch.ops.higher_order.map_impl (torch._higher_order_ops.map) becomes a
// while_loop over the slices of its xs (static first axis), the body
// converted into the loop's body and its outputs written into stacked
// buffers. Other higher-order operators (wrapped subgraphs, scan, ...) are
// unsupported.
//
// After conversion the IR's shape functions set every node's Meta
// (fxgraph.Registry.PropagateShapes), and the result is checked against the
// archive's tensor metadata of every value: dtype and rank must match, and
// so must every dim that both know. A mismatch is an ErrFormat error naming
// the node: it catches mapping bugs at import time rather than as wrong
// numbers.
package fx
