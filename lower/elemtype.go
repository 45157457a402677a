package lower

import (
	"fmt"

	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// elementTypes maps the IR's dtypes to the typed emitter's element types.
var elementTypes = map[tensor.DType]stablehlo.ElementType{
	tensor.Bool: stablehlo.Bool, tensor.Int8: stablehlo.I8, tensor.Int16: stablehlo.I16,
	tensor.Int32: stablehlo.I32, tensor.Int64: stablehlo.I64, tensor.Uint8: stablehlo.U8,
	tensor.Float16: stablehlo.F16, tensor.BFloat16: stablehlo.BF16,
	tensor.Float32: stablehlo.F32, tensor.Float64: stablehlo.F64,
}

// ElementType is the StableHLO element type of an IR dtype, for programs
// built on the typed emitter.
func ElementType(dt tensor.DType) (stablehlo.ElementType, error) {
	if e, ok := elementTypes[dt]; ok {
		return e, nil
	}
	return stablehlo.Invalid, fmt.Errorf("lower: no StableHLO element type for dtype %s", dt)
}
