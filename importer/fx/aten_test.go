package fx_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/importer/fx"
	"github.com/xserve/xserve/lower"
)

// TestATenSurface imports the archives of testdata/aten (plain
// torch.export without run_decompositions, written by
// make_aten_fixtures.py), checks that each holds the operator its
// decomposition is for, and runs every case (batch 2 and 3 where the batch
// is dynamic) on the XLA CPU plugin against torch eager's outputs.
func TestATenSurface(t *testing.T) {
	tests := []struct {
		name string
		ops  []string // operators the archive must hold (from ops.txt)
	}{
		{"bitwise", []string{"aten.__and__.Tensor", "aten.__or__.Tensor", "aten.__xor__.Tensor"}},
		{"bitwise_scalar", []string{"aten.__and__.Scalar", "aten.__or__.Scalar", "aten.__xor__.Scalar", "aten.__lshift__.Scalar", "aten.__rshift__.Scalar"}},
		{"bitwise_inplace", []string{"aten.__iand__.Tensor", "aten.__ior__.Scalar", "aten.__ixor__.Tensor"}},
		{"inplace", []string{"aten.add_.Tensor", "aten.mul_.Tensor", "aten.relu_.default", "aten.fill_.Scalar", "aten.sub_.Tensor", "aten.clamp_.default", "aten.sigmoid_.default"}},
		{"view_write", []string{"aten.relu_.default", "aten.fill_.Tensor", "aten.zero_.default", "aten.slice.Tensor", "aten.select.int"}},
		{"pointwise", []string{"aten.square.default", "aten.erfc.default", "aten.sgn.default", "aten.special_expm1.default", "aten.clip.default",
			"aten.frac.default", "aten.log_sigmoid.default", "aten.selu.default", "aten.celu.default", "aten.hardshrink.default", "aten.logit.default",
			"aten.addcmul.default", "aten.addcdiv.default", "aten.lerp.Scalar", "aten.lerp.Tensor", "aten.hypot.default", "aten.logaddexp.default",
			"aten.xlogy.Tensor", "aten.floor_divide.default", "aten.isclose.default", "aten.max.other", "aten.min.other"}},
		{"reductions", []string{"aten.glu.default", "aten.prelu.default", "aten.rms_norm.default", "aten.std.dim", "aten.var.dim", "aten.var_mean.dim",
			"aten.std_mean.correction", "aten.outer.default", "aten.narrow.default", "aten.tile.default", "aten.repeat_interleave.self_int",
			"aten.one_hot.default", "aten.instance_norm.default", "aten.cosine_similarity.default", "aten.count_nonzero.default",
			"aten.aminmax.default", "aten.argsort.default", "aten.scatter_add.default", "aten.mse_loss.default", "aten.broadcast_tensors.default",
			"aten.tensor_split.indices", "aten.tensor_split.sections", "aten.numpy_T.default"}},
		{"shapes", []string{"aten.hsplit.int", "aten.hsplit.array", "aten.vsplit.array", "aten.meshgrid.indexing", "aten.atleast_2d.default",
			"aten.atleast_3d.default", "aten.nan_to_num.default", "aten.take_along_dim.default", "aten.tensordot.default", "aten.inner.default",
			"aten.cdist.default", "aten.pairwise_distance.default", "aten.dist.default", "aten.diagonal.default", "aten.trace.default",
			"aten.unfold.default", "aten.rot90.default", "aten.addmv.default", "aten.copysign.Tensor"}},
		{"repeat", []string{"aten.repeat.default"}},
		{"cumulative", []string{"aten.logcumsumexp.default", "aten.diag_embed.default", "aten.index_add.default"}},
		{"diff", []string{"aten.diff.default"}},
		{"weight_norm", []string{"aten._weight_norm.default"}},
		{"swap", []string{"aten.swapaxes.default", "aten.swapdims.default", "aten.movedim.int", "aten.moveaxis.intlist"}},
		{"einsum", []string{"aten.einsum.default"}},
		{"adaptive_avg_pool3d", []string{"aten.adaptive_avg_pool3d.default"}},
		{"adaptive_max_pool", []string{"aten.adaptive_max_pool1d.default", "aten.adaptive_max_pool2d.default", "aten.adaptive_max_pool3d.default"}},
		{"upsample_nearest", []string{"aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec", "aten.upsample_nearest3d.vec", "aten._upsample_nearest_exact2d.vec"}},
		{"upsample_linear", []string{"aten.upsample_linear1d.vec", "aten.upsample_bilinear2d.vec", "aten.upsample_trilinear3d.vec"}},
		{"upsample_bicubic", []string{"aten.upsample_bicubic2d.vec"}},
		{"wrapped_regions", []string{"higher_order.wrap_with_set_grad_enabled", "higher_order.wrap_with_autocast"}},
	}
	client := openPlugin(t)
	l := lower.New(lower.Options{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := filepath.Join("aten", tc.name)
			data, err := os.ReadFile(filepath.Join("testdata", name, "ops.txt"))
			if err != nil {
				t.Fatal(err)
			}
			have := strings.Fields(string(data))
			for _, op := range tc.ops {
				if !slices.Contains(have, op) {
					t.Errorf("the archive does not hold %s (it holds %v)", op, have)
				}
				if !fx.Supports(op) {
					t.Errorf("fx.Supports(%q) is false", op)
				}
			}
			g, err := fx.ImportFile(fixture(name))
			if err != nil {
				t.Fatal(err)
			}
			for k := 0; ; k++ {
				inputs := readCase(t, name, "in", k)
				if len(inputs) == 0 {
					if k == 0 {
						t.Fatal("fixture has no cases")
					}
					break
				}
				want := readCase(t, name, "out", k)
				dims, err := g.BindDims(inputs)
				if err != nil {
					t.Fatalf("case %d: %v", k, err)
				}
				prog, err := l.Lower(g, dims)
				if err != nil {
					t.Fatalf("case %d: %v", k, err)
				}
				got, err := conformance.Execute(context.Background(), client, prog, inputs)
				if err != nil {
					t.Fatalf("case %d: %v", k, err)
				}
				if len(got) != len(want) {
					t.Fatalf("case %d: %d outputs, want %d", k, len(got), len(want))
				}
				for j := range want {
					if err := closeTo(got[j], want[j]); err != nil {
						t.Errorf("case %d (dims %v) output %d (%s): %v", k, dims, j, g.OutputName(j), err)
					}
				}
			}
		})
	}
}
