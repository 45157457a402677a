// Package platforms gathers the platforms xserve lowers for, so that the
// callers that build a lowerer for a PJRT plugin (engine, xserve inspect,
// the harnesses) get each platform's defaults, passes and rules: the CPU's
// from package lower/cpu, CUDA's and TPU's from here, where they only set
// options.
package platforms

import (
	"fmt"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/lower/stablehlo"
)

// All returns every platform.
func All() []*lower.Platform {
	return []*lower.Platform{cpu.Platform(), CUDA(), TPU()}
}

// New returns a lowerer for opts with the platform opts.Platform names.
func New(opts lower.Options) *lower.Lowerer {
	return lower.New(opts, All()...)
}

// Named returns the platform called name (a PJRT platform name).
func Named(name string) (*lower.Platform, error) {
	for _, p := range All() {
		if p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("platforms: no platform %q (want cpu, cuda or tpu)", name)
}

// CUDA is the CUDA platform: the generic rules, which XLA GPU compiles as
// they are (no custom calls). float64 and 64-bit integers are native
// there but slow: a GPU has few float64 units (1/2 of float32's rate on
// an H100, 1/64 on most others) and emulates 64-bit integer products.
func CUDA() *lower.Platform {
	return &lower.Platform{Name: "cuda", Slow: []stablehlo.ElementType{stablehlo.F64, stablehlo.I64, stablehlo.U64}}
}

// TPU is the TPU platform: the generic rules with 64-bit values narrowed,
// as JAX does by default (jax_enable_x64 off): float64 computed as float32
// (TPUs have no float64) and int64 as int32 (emulated, slow). Inputs and
// outputs keep their dtypes at the API; the server converts them.
func TPU() *lower.Platform {
	return &lower.Platform{Name: "tpu", Defaults: func(o *lower.Options) {
		o.NarrowInt64 = true
		o.NarrowFloat64 = true
	}, Lacks: []stablehlo.ElementType{stablehlo.F64}, Slow: []stablehlo.ElementType{stablehlo.I64, stablehlo.U64}}
}
