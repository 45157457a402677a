// Package platforms gathers the platforms xserve lowers for, so that the
// callers that build a lowerer for a PJRT plugin (engine, xserve inspect,
// the harnesses) get each platform's defaults, passes and rules: the CPU's
// from package lower/cpu, CUDA's and TPU's from here, where they only set
// options.
package platforms

import (
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
)

// All returns every platform.
func All() []*lower.Platform {
	return []*lower.Platform{cpu.Platform(), CUDA(), TPU()}
}

// New returns a lowerer for opts with the platform opts.Platform names.
func New(opts lower.Options) *lower.Lowerer {
	return lower.New(opts, All()...)
}

// CUDA is the CUDA platform: the generic rules, which XLA GPU compiles as
// they are (no custom calls; float64 and int64 are native there).
func CUDA() *lower.Platform {
	return &lower.Platform{Name: "cuda"}
}

// TPU is the TPU platform: the generic rules with 64-bit values narrowed,
// as JAX does by default (jax_enable_x64 off): float64 computed as float32
// (TPUs have no float64) and int64 as int32 (emulated, slow). Inputs and
// outputs keep their dtypes at the API; the server converts them.
func TPU() *lower.Platform {
	return &lower.Platform{Name: "tpu", Defaults: func(o *lower.Options) {
		o.NarrowInt64 = true
		o.NarrowFloat64 = true
	}}
}
