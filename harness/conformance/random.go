package conformance

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/tensor"
)

// propertyCheck checks the outputs of a case whose expected outputs are
// samples of a random operator, which no other generator reproduces: got
// against the case's inputs and the expected outputs' dtypes and shapes.
type propertyCheck func(inputs, got, want []*tensor.Tensor, rtol, atol float64) error

// RandomCases names the cases checked by properties instead of values, and
// says what is checked. Dropout with ratio 0 is deterministic and compared
// as usual.
var RandomCases = map[string]string{
	"node/test_bernoulli":                     bernoulliProps,
	"node/test_bernoulli_double":              bernoulliProps,
	"node/test_bernoulli_double_expanded":     bernoulliProps,
	"node/test_bernoulli_expanded":            bernoulliProps,
	"node/test_bernoulli_seed":                bernoulliProps,
	"node/test_bernoulli_seed_expanded":       bernoulliProps,
	"node/test_training_dropout":              dropoutProps,
	"node/test_training_dropout_default":      dropoutProps,
	"node/test_training_dropout_default_mask": dropoutProps,
	"node/test_training_dropout_mask":         dropoutProps,
}

const (
	bernoulliProps = "random samples: dtype and shape as expected, every value 0 or 1, both present"
	dropoutProps   = "random mask: dtype and shape as expected, every output x/(1-ratio) where the mask is true and 0 where false, both present"
)

// randomCheck returns the property check of case id, or nil.
func randomCheck(id string) propertyCheck {
	switch RandomCases[id] {
	case bernoulliProps:
		return checkBernoulli
	case dropoutProps:
		return checkDropout
	}
	return nil
}

func sameKind(got, want []*tensor.Tensor) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].DType != want[i].DType || tensor.ShapeString(got[i].Shape) != tensor.ShapeString(want[i].Shape) {
			return fmt.Errorf("output %d is %s, want %s", i, got[i], want[i])
		}
	}
	return nil
}

func checkBernoulli(_, got, want []*tensor.Tensor, _, _ float64) error {
	if err := sameKind(got, want); err != nil {
		return err
	}
	seen := map[float64]bool{}
	for i := range got[0].NumElements() {
		v := got[0].Float64At(i)
		if v != 0 && v != 1 {
			return fmt.Errorf("element %d is %v, want 0 or 1", i, v)
		}
		seen[v] = true
	}
	if len(seen) != 2 {
		return fmt.Errorf("all %d samples are %v (probabilities in (0, 1))", got[0].NumElements(), got[0].Float64At(0))
	}
	return nil
}

// checkDropout checks Dropout(x, ratio, training_mode=true) outputs y and
// the optional mask.
func checkDropout(inputs, got, want []*tensor.Tensor, rtol, atol float64) error {
	if err := sameKind(got, want); err != nil {
		return err
	}
	if len(inputs) < 2 {
		return fmt.Errorf("dropout case with %d inputs, want x and ratio", len(inputs))
	}
	x, ratio, y := inputs[0], inputs[1].Float64At(0), got[0]
	kept, dropped := 0, 0
	for i := range x.NumElements() {
		xv, yv := x.Float64At(i), y.Float64At(i)
		scaled := xv / (1 - ratio)
		isKept := math.Abs(yv-scaled) <= atol+rtol*math.Abs(scaled)
		isDropped := yv == 0
		if !isKept && !isDropped {
			return fmt.Errorf("element %d is %v, want 0 or x/(1-ratio) = %v", i, yv, scaled)
		}
		if len(got) > 1 {
			m := got[1].Int64At(i) != 0
			if m && !isKept || !m && !isDropped {
				return fmt.Errorf("element %d is %v where the mask is %v (x %v)", i, yv, m, xv)
			}
			if m {
				kept++
			} else {
				dropped++
			}
		} else if isDropped && xv != 0 {
			dropped++
		} else {
			kept++
		}
	}
	if kept == 0 || dropped == 0 {
		return fmt.Errorf("%d kept and %d dropped of %d with ratio %v", kept, dropped, x.NumElements(), ratio)
	}
	return nil
}

// BadData explains the cases whose expected outputs contradict their own
// model, by case ID; a failure of such a case says so. They still count as
// failed.
var BadData = map[string]string{
	"node/test_adam_multiple":                 "the expected outputs were computed with epsilon 1e-2, which the model's Adam node does not set (its default is 1e-6; onnx's case generator omits the attribute)",
	"node/test_qlinearmatmul_2D_int8_float16": qlinearWraps,
	"node/test_qlinearmatmul_2D_int8_float32": qlinearWraps,
	"node/test_qlinearmatmul_3D_int8_float16": qlinearWraps,
	"node/test_qlinearmatmul_3D_int8_float32": qlinearWraps,
}

// qlinearWraps explains the int8 QLinearMatMul cases: the ONNX reference
// converts with numpy's astype, which wraps, where the operator's
// definition (and ONNX Runtime, whose outputs equal xserve's) saturates.
const qlinearWraps = "the expected outputs wrap results beyond int8's range (the ONNX reference's astype: -236 gives 20) where QLinearMatMul saturates; ONNX Runtime gives -128, as xserve does"
