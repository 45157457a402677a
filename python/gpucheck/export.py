"""Exports the check's models with the torch installed where the check runs
(ONNX and torch.export .pt2, batch dimension dynamic) and writes the model
repository `xserve serve` loads."""

import os
import warnings

import torch

ONNX_OPSET = 17


def _short(e, limit=600):
    s = f"{type(e).__name__}: {e}"
    return s if len(s) <= limit else s[:limit] + " ..."


def export_onnx(spec, example, path):
    """torch.onnx.export: the TorchScript exporter (dynamo=False, no
    onnxscript needed), else the dynamo exporter. Returns what was used."""
    errors = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(spec.export_module, (torch.from_numpy(example),), path, dynamo=False, opset_version=ONNX_OPSET,
                              input_names=[spec.input_name], output_names=[spec.output_name],
                              dynamic_axes={spec.input_name: {0: "batch"}, spec.output_name: {0: "batch"}})
        return f"torch.onnx.export(dynamo=False, opset_version={ONNX_OPSET})"
    except Exception as e:  # noqa: BLE001 - report the exporter's own error
        errors.append("dynamo=False: " + _short(e))
    try:
        batch = torch.export.Dim("batch", min=1, max=1024)
        torch.onnx.export(spec.export_module, (torch.from_numpy(example),), path, dynamo=True, opset_version=18,
                          input_names=[spec.input_name], output_names=[spec.output_name],
                          dynamic_shapes={spec.input_name: {0: batch}}, external_data=False)
        return "torch.onnx.export(dynamo=True, opset_version=18)"
    except Exception as e:  # noqa: BLE001
        errors.append("dynamo=True: " + _short(e))
    raise RuntimeError("ONNX export failed: " + " | ".join(errors))


def export_pt2(spec, example, path):
    """torch.export.export with a dynamic batch, run_decompositions(), saved."""
    batch = torch.export.Dim("batch", min=1, max=1024)
    ep = torch.export.export(spec.export_module, (torch.from_numpy(example),), dynamic_shapes={spec.input_name: {0: batch}})
    torch.export.save(ep.run_decompositions(), path)
    return "torch.export.export(...).run_decompositions(); torch.export.save"


CONFIG = """# Written by python/gpucheck (make gpu-check).
buckets:
  batch: {buckets}
warmup: eager
batching:
  enabled: {batching}
  max_queue_delay: {delay}
"""


def write_model(repo, name, model_file, buckets, batching, delay="2ms"):
    """repo/name/1/<model file> (a hard link, or a copy) and its config.yaml."""
    d = os.path.join(repo, name, "1")
    os.makedirs(d, exist_ok=True)
    dst = os.path.join(d, os.path.basename(model_file))
    if not os.path.exists(dst):
        try:
            os.link(model_file, dst)
        except OSError:
            import shutil

            shutil.copyfile(model_file, dst)
    with open(os.path.join(repo, name, "config.yaml"), "w") as f:
        f.write(CONFIG.format(buckets=list(buckets), batching="true" if batching else "false", delay=delay))
