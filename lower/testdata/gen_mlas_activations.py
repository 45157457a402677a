"""Writes lower/testdata/mlas_activations.bin: ONNX Runtime's Sigmoid and
Tanh (its MLAS kernels, the ones its CPU LSTM uses) of 4096 float32 inputs
spread over [-24, 24] with a random part, for lower's TestMLASActivations:
three little-endian float32 arrays, inputs then Sigmoid then Tanh.

Pinned: onnx 1.19.1, onnxruntime 1.23.2, numpy (.venv). From the
repository root:

	.venv/bin/python lower/testdata/gen_mlas_activations.py
"""
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

N = 4096
x = np.concatenate([np.linspace(-24, 24, N // 2, dtype=np.float32),
                    np.random.default_rng(3).standard_normal(N // 2).astype(np.float32) * 3]).astype(np.float32)
g = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Tanh", ["x"], ["t"])], "mlas",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
                      [helper.make_tensor_value_info("s", TensorProto.FLOAT, [N]), helper.make_tensor_value_info("t", TensorProto.FLOAT, [N])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
so = ort.SessionOptions()
so.intra_op_num_threads = 1
s, t = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
with open("lower/testdata/mlas_activations.bin", "wb") as f:
    f.write(x.tobytes() + s.astype(np.float32).tobytes() + t.astype(np.float32).tobytes())
