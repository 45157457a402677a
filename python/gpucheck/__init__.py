"""The GPU check of xserve (make gpu-check; docs/GPU.md): its models,
exports, references, competitors and report. Runs on the GPU host's own
Python (torch, JAX, numpy; nothing else) and, as a dry run on the CPU,
under make test."""
