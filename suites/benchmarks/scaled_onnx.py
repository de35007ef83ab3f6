"""A user's ONNX file with N MatMul+Relu layers of 256x256 (work proportional to N): `python -m harness_suites.benchmarks.scaled_onnx N PATH` (the 1.8x model of #52: N 5, then N 9)."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

n, path = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
nodes, inits, prev = [], [], "x"
for i in range(n):
    w = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
    inits.append(helper.make_tensor(f"w{i}", TensorProto.FLOAT, w.shape, w.ravel()))
    nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
    prev = f"r{i}"
nodes.append(helper.make_node("Identity", [prev], ["y"]))
g = helper.make_graph(nodes, "scaled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 256])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.save(m, path)
