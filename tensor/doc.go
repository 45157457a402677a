// Package tensor holds host tensors: a dtype, a shape and the little-endian,
// row-major bytes of the elements. Importers produce them (weights, constants),
// the pjrt package copies them to and from devices, and the serving layer
// decodes requests into them. It also reads and writes NumPy .npy files.
//
// The package has no dependency on any other xserve package, so every layer can
// share one tensor type without import cycles.
package tensor
