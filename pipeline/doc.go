// Package pipeline turns a pipeline model's config (a Triton ensemble's
// ensemble_scheduling, or config.yaml's pipeline:) into a Plan: its steps
// (other models' graphs and built-in steps) cut into segments, each segment
// one graph that serving serves like a model, with one executable per
// bucket.
//
// Build stitches consecutive steps at the IR level: a model step's graph
// is inlined (fxgraph.Graph.Inline) with its placeholders replaced by the
// values that feed them, a built-in step adds its nodes (ATen operators
// for softmax, top-k, normalisation, crops and resizes of fixed-size
// values; host operators for image decoding, boxes and their crops, CTC
// paths and labels). Within a segment nothing crosses to the host between
// steps: the host nodes run before the program (decoding) or after it
// (labels), as fxgraph.SplitHost cuts them. A new segment starts where
// that is impossible:
//
//   - a step whose device nodes read values the host made from this
//     segment's device results (a detector's boxes, the crops cut at them:
//     their count is data-dependent), and
//   - a step whose model decides its sizes at run time (data-dependent
//     output sizes, guarded branches, a deferred import), which runs whole,
//     as its own model, and
//   - a step the config keeps separate (separate: true), and every step
//     with fuse: none (Triton's way, for comparison).
//
// The package reads no files itself (Options carries the step graphs and
// a reader for labels files) and compiles nothing; docs/PIPELINES.md
// describes the configuration and every built-in step.
package pipeline
