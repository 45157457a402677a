// Package zoo checks xserve against a model zoo exported by PyTorch: for
// every model directory (written by python/zoo/export.py) and every format in
// it (.onnx and .pt2), it imports the model (importer.Load), lowers and
// compiles it once per reference batch size, runs it on a PJRT plugin and
// compares each output with PyTorch eager's reference output.
//
// A model directory holds manifest.json (see Manifest), the model files and
// the reference inputs and outputs as .npy files. The committed fixtures in
// testdata/zoo are reduced variants of the models (make zoo-fixtures); the
// full-size zoo is generated into zoo/ by make zoo and checked by make
// zoo-check (go run ./cmd/zoo-check -dir zoo).
//
// A float output matches when its largest absolute error is at most
// RelTolerance (1e-4) * max(1, max|reference|) (see Tolerance); integer
// outputs must match exactly. No model needs an exception today (Tolerances
// is empty; an entry must say why it is needed). Anything else —
// a model that fails to export, import, lower, compile or run, a wrong
// output count, dtype or shape — is a failure with its error; nothing is
// skipped.
package zoo
