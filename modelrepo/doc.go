// Package modelrepo reads xserve's model repository: a directory holding one
// directory per model, each with numbered version directories and an optional
// config.yaml:
//
//	models/
//	  resnet18/
//	    config.yaml        optional
//	    1/model.onnx
//	    2/model.pt2
//
// A model name matches ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$ and never contains
// ".."; a version is a positive integer written without sign or leading zeros;
// a version directory holds exactly one of model.onnx and model.pt2 (other
// files, such as ONNX external data, may sit beside it). Entries whose names
// start with "." are ignored everywhere, as are plain files at the top level.
// Symbolic links are followed only while they resolve inside the repository.
//
// ParseConfig and LoadConfig read config.yaml strictly: unknown keys,
// duplicate keys, values of the wrong type and impossible values are all
// reported, each naming the file, the key path and the line, and all the
// problems of a file are returned together. DefaultConfig is what a model
// without config.yaml gets.
//
// Repository.Scan reads the whole tree into a Snapshot. A problem with one
// model (a broken config, a stray directory, a bad name) is recorded on that
// model's ModelEntry and never affects the others; a problem with one version
// is recorded in ModelEntry.VersionErrors. ModelEntry.Selected applies the
// model's version policy. Repository.Resolve maps a model name taken from a
// request to its directory, rejecting anything that could leave the
// repository.
//
// Repository.Watch polls Scan and reports the differences between successive
// snapshots, computed by Diff, as Changes. The package never loads or compiles
// a model: that is package serving's job.
package modelrepo
