package lower

import (
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
)

// Platform is what a PJRT platform adds to the generic rules, which are
// written for every platform alike: its option defaults, the graph passes
// worth running for it (epilogue fusion where it has fused kernels), and
// the rules it computes its own way (Primitives, Registry.Override). The
// CPU's is package lower/cpu's; New applies the one whose Name is
// Options.Platform.
type Platform struct {
	// Name is the PJRT platform name: "cpu", "cuda", "tpu".
	Name string
	// Defaults sets the options the platform wants, where unset.
	Defaults func(o *Options)
	// Specialized runs the platform's graph passes on g, specialized to a
	// bucket (static shapes; a copy the lowerer owns), before lowering.
	Specialized func(g *fxgraph.Graph, o Options)
	// Register replaces rules of r (Override) and sets r's primitives for
	// the platform.
	Register func(r *Registry, o Options)
	// CustomCalls are the custom call targets the platform's backend
	// provides (the CPU's kernel library); any other is one it lacks.
	CustomCalls []string
	// Lacks are the element types the platform cannot hold (a TPU's f64).
	Lacks []stablehlo.ElementType
	// Slow are the element types it computes on slowly, emulated or on
	// few units (64-bit integers on GPUs and TPUs, f64 on GPUs).
	Slow []stablehlo.ElementType
}

// Epilogue is what a fused operator (fxgraph.XserveConvFused,
// XserveMatmulFused) applies to its product, lowered: values in the
// product's compute dtype.
type Epilogue struct {
	// Bias, when set, is a [N] vector added to every row of the product.
	Bias *stablehlo.Value
	// Residual, when set, is added to the product (its shape).
	Residual *stablehlo.Value
	// Activation (a name of fxgraph.Activations, "" for none) is applied
	// last, with Alpha (leaky relu's slope).
	Activation string
	Alpha      float64
}

// Primitives are computations several rules share that a platform may
// compute its own way (package lower/cpu: its kernel library). Each may
// decline a call by returning a nil value; a nil field declines every
// call. The generic StableHLO is used then.
type Primitives struct {
	// Dot is the dot_general d of x and y (float operands in the compute
	// dtype): every matrix product of the rules (linear, matmul, mm, bmm,
	// einsum, ...); done reports that e (nil for none) is applied too.
	Dot func(ctx *Context, x, y *stablehlo.Value, d stablehlo.DotDims, e *Epilogue) (v *stablehlo.Value, done bool, err error)
	// Conv is the convolution (not transposed) p of x [N, C, spatial...]
	// with w [out, in/groups, kernel...] (of static dims xd and wd, in the
	// compute dtype), plus bias ([out], or nil), giving outDims; done
	// reports that e (nil for none) is applied too.
	Conv func(ctx *Context, x, w, bias *stablehlo.Value, xd, wd, outDims []int64, p fxgraph.ConvParams, e *Epilogue) (y *stablehlo.Value, done bool, err error)
	// MaxPool is the max pooling p of x with padding lo/hi under the
	// window, giving outDims (values only).
	MaxPool func(ctx *Context, x *stablehlo.Value, outDims []int64, p fxgraph.PoolParams, lo, hi []int64) (*stablehlo.Value, error)
	// AvgPool is the average pooling p of x with padding lo/hi under the
	// window, giving outDims.
	AvgPool func(ctx *Context, x *stablehlo.Value, outDims []int64, p fxgraph.PoolParams, lo, hi []int64) (*stablehlo.Value, error)
	// Softmax is the softmax of x (the log-softmax when log) along its
	// last dim, in the compute dtype.
	Softmax func(ctx *Context, x *stablehlo.Value, log bool) (*stablehlo.Value, error)
	// LayerNorm is x normalized along its last dim (mean 0, variance 1
	// with eps added to it), times scale plus shift (each of the last
	// dim's size), in the compute dtype.
	LayerNorm func(ctx *Context, x, scale, shift *stablehlo.Value, eps float64) (*stablehlo.Value, error)
	// QConv is fxgraph.XserveQLinearConv: the quantized convolution p of x
	// (uint8 or int8) with w (int8, zero point 0), plus bias (int32 [out],
	// or nil), requantized with scale (float32 [out]) and q's zero points.
	QConv func(ctx *Context, x, w, bias, scale *stablehlo.Value, xd, wd, outDims []int64, p fxgraph.ConvParams, q fxgraph.QLinearConvParams) (*stablehlo.Value, error)
}
