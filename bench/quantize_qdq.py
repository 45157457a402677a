"""quantize_qdq.py writes the static QDQ int8 version of an image model of the
zoo layout (<dir>/model.onnx, <dir>/b1.in.image.npy) with ONNX Runtime's
quantizer (uint8 activations, int8 per-channel weights; calibration: the
fixture's image plus noise, 4 samples, fixed seed), in the same layout, so
that bench/peers.py times the fp32 and the int8 model side by side:

  .venv-bench/bin/python bench/quantize_qdq.py zoo/mobilenet_v3_small .cache/int8/mobilenet_v3_small_qdq
  .venv-bench/bin/python bench/peers.py --runner bin/bench-runner --zoo .cache/int8 --batches 1 --baselines ""
"""

import os
import shutil
import sys

import numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static


class Calibration(CalibrationDataReader):
    def __init__(self, x, n=4):
        rng = np.random.default_rng(0)
        self.it = iter([{"image": (x + 0.1 * rng.standard_normal(x.shape)).astype(np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self.it, None)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    x = np.load(os.path.join(src, "b1.in.image.npy"))
    quantize_static(os.path.join(src, "model.onnx"), os.path.join(dst, "model.onnx"), Calibration(x),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True)
    shutil.copy(os.path.join(src, "b1.in.image.npy"), dst)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
