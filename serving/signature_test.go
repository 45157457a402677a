package serving

import (
	"strings"
	"testing"

	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/modelrepo"
)

func TestSignatureConfigMerge(t *testing.T) {
	pair, err := importer.Load(pairModel)
	if err != nil {
		t.Fatal(err)
	}
	cnn, err := importer.Load(tinyCNN)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		cnn   bool
		yaml  string
		want  string // error text; "" for success
		check func(t *testing.T, s *BucketPlan)
	}{
		{name: "no config", check: func(t *testing.T, s *BucketPlan) {
			if s.symbolNames() != "batch, seq" || !s.Symbols[0].Defaulted || !s.Symbols[1].Defaulted || !s.Symbols[0].Batch || s.Symbols[1].Batch {
				t.Errorf("symbols %+v %+v", s.Symbols[0], s.Symbols[1])
			}
		}},
		{name: "dtype", yaml: "inputs:\n  - name: x\n    dtype: int64\n",
			want: `serving: models/m/config.yaml: inputs[0].dtype: is int64, but the model's input "x" is float32[batch,seq]`},
		{name: "unknown input", yaml: "inputs:\n  - name: z\n",
			want: `serving: models/m/config.yaml: inputs[0].name: the model has no input "z" (inputs: x, y)`},
		{name: "rank", yaml: "inputs:\n  - name: y\n    dims: [batch]\n",
			want: `serving: models/m/config.yaml: inputs[0].dims: [batch] has rank 1, but the model's input "y" is float32[batch,seq] (rank 2)`},
		{name: "static dim differs", cnn: true, yaml: "inputs:\n  - name: image\n    dims: [batch, 4, 32, 32]\n",
			want: `serving: models/m/config.yaml: inputs[0].dims[1]: is 4, but dim 1 of the model's input "image" is 3 (float32[batch,3,32,32])`},
		{name: "symbol for a static dim", cnn: true, yaml: "inputs:\n  - name: image\n    dims: [batch, c, 32, 32]\n",
			want: `serving: models/m/config.yaml: inputs[0].dims[1]: is symbol c, but dim 1 of the model's input "image" is static 3 (float32[batch,3,32,32])`},
		{name: "one symbol, two names", yaml: "inputs:\n  - name: x\n    dims: [a, seq]\n  - name: y\n    dims: [b, seq]\n",
			want: `serving: models/m/config.yaml: inputs[1].dims[0]: is b, but inputs[0].dims[0] already makes the model's symbol batch a`},
		{name: "output dtype", yaml: "outputs:\n  - name: total\n    dtype: float16\n",
			want: `serving: models/m/config.yaml: outputs[0].dtype: is float16, but the model's output "total" is float32[batch]`},
		{name: "unknown output", yaml: "outputs:\n  - name: nope\n",
			want: `serving: models/m/config.yaml: outputs[0].name: the model has no output "nope" (outputs: sum, total)`},
		{name: "output dim differs", yaml: "outputs:\n  - name: sum\n    dims: [batch, 7]\n",
			want: `serving: models/m/config.yaml: outputs[0].dims[1]: is 7, but dim 1 of the model's output "sum" is seq (float32[batch,seq])`},
		{name: "renamed and pinned", yaml: "inputs:\n  - name: x\n    dims: [n, 16]\nbuckets:\n  n: [1, 8]\n  other: [2]\n",
			check: func(t *testing.T, s *BucketPlan) {
				if s.symbolNames() != "n" || s.Symbols[0].Defaulted || !s.Symbols[0].Batch || strings.Join(s.UnusedBuckets, ",") != "other" {
					t.Errorf("symbols %+v unused %v", s.Symbols[0], s.UnusedBuckets)
				}
				if got := s.Inputs[1].String() + " " + s.Outputs[0].String() + " " + s.Outputs[1].String(); got != "float32[n,16] float32[n,16] float32[n]" {
					t.Errorf("signature %s", got)
				}
				b := s.buckets()
				if len(b) != 2 || s.keyName(b[1]) != "n=8" || s.modelDims(b[1])["batch"] != 8 || s.modelDims(b[1])["seq"] != 16 {
					t.Errorf("buckets %v", b)
				}
			}},
		{name: "pad value", yaml: "inputs:\n  - name: y\n    pad_value: -1\n", check: func(t *testing.T, s *BucketPlan) {
			if p := s.Inputs[1].pad; len(p) != 4 || p[3] != 0xbf || p[2] != 0x80 {
				t.Errorf("pad bytes of -1.0: %x", p)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := modelrepo.ParseConfig("models/m/config.yaml", []byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			g := pair
			if c.cnn {
				g = cnn
			}
			s, err := NewBucketPlan(g, cfg, "models/m/config.yaml", nil)
			if c.want != "" {
				if err == nil || err.Error() != c.want {
					t.Errorf("got  %v\nwant %s", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.check != nil {
				c.check(t, s)
			}
		})
	}
}
