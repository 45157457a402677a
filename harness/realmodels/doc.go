// Package realmodels holds the test of the small real-model set: models
// the project does not ship, made by real third-party exporters or shipped
// trained inside PyPI packages, run end to end on the XLA CPU PJRT plugin
// against ONNX Runtime. The full suite is `make realmodels`
// (python/realmodels, docs/real-models.md).
package realmodels
