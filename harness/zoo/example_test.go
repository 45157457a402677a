package zoo_test

import (
	"errors"
	"os"
	"time"

	"github.com/xserve/xserve/harness/zoo"
)

func ExampleWriteTable() {
	results := []zoo.Result{
		{Model: "resnet18", Format: "onnx", Import: 3 * time.Millisecond, Passed: true, MaxError: 1.9e-6, Tolerance: 3.3e-4,
			Buckets: []zoo.Bucket{
				{Batch: 1, Lower: 20 * time.Millisecond, Compile: 430 * time.Millisecond, Run: 2 * time.Millisecond, Passed: true},
				{Batch: 3, Lower: 18 * time.Millisecond, Compile: 365 * time.Millisecond, Run: 5 * time.Millisecond, Passed: true},
			}},
		{Model: "resnet18", Format: "pt2", Stage: zoo.StageImport,
			Err: errors.New("importer: resnet18/model.pt2: torch.export archives are not supported yet")},
	}
	zoo.WriteTable(os.Stdout, results)
	zoo.WriteFailures(os.Stdout, results)
	// Output:
	// | model | format | import ms | lower+compile ms per bucket | run ms per bucket | max abs error (tolerance) | status |
	// |---|---|--:|---|---|---|---|
	// | resnet18 | onnx | 3 | b1: 450, b3: 383 | b1: 2, b3: 5 | 1.9e-06 (0.00033) | pass |
	// | resnet18 | pt2 | 0 | – | – | – | FAIL (import): importer: resnet18/model.pt2: torch.export archives are not supported yet |
	//
	// 1 of 2 model/format pairs passed.
	//
	// ## Failures
	//
	// ### resnet18/pt2 (import)
	//
	// ```text
	// importer: resnet18/model.pt2: torch.export archives are not supported yet
	// ```
}
