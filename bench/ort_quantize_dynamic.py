#!/usr/bin/python3
"""ONNX Runtime's dynamic int8 quantization of a bertcc export, written with the `onnx` package
(Debian python3-onnx; ONNX Runtime's own Python quantizer is not packaged there).

Every MatMul whose second input is a 2-D float initializer (the linear layers: Q, K, V, attention
output, intermediate, output, pooler, heads) becomes what `onnxruntime.quantization.quantize_dynamic`
writes with its defaults (weight_type QInt8, per_channel False, reduce_range False):
    x -> DynamicQuantizeLinear (uint8, per tensor, per call) -> x_q, x_scale, x_zp
    W -> int8, symmetric per tensor: w_scale = max|W| / 127, zero point 0
    MatMulInteger(x_q, W_q, x_zp, w_zp) -> Cast(float) -> Mul(x_scale * w_scale)
and the following bias Add is left as it was. ONNX Runtime fuses the chain at load
(DynamicQuantizeMatMul / MatMulIntegerToFloat). The two attention MatMuls (activation x
activation), LayerNorm, softmax and GELU stay fp32, as ONNX Runtime's quantize_dynamic leaves them
by default (MatMulConstBOnly) and PyTorch's int8 does; bertcc's int8 runs the attention's products
in int8 too since its sixteenth session (docs/numerics.md).
    ort_quantize_dynamic.py IN.onnx OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto


def main():
    src, dst = sys.argv[1], sys.argv[2]
    m = onnx.load(src)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    nodes, done, drop = [], 0, set()
    for n in g.node:
        w = inits.get(n.input[1]) if n.op_type == "MatMul" and len(n.input) == 2 else None
        if w is None or len(w.dims) != 2 or w.data_type != TensorProto.FLOAT:
            nodes.append(n)
            continue
        W = numpy_helper.to_array(w)
        amax = float(np.abs(W).max())
        ws = amax / 127.0 if amax > 0 else 1.0
        Wq = np.clip(np.rint(W / ws), -127, 127).astype(np.int8)
        b = n.input[1]
        g.initializer.extend([numpy_helper.from_array(Wq, b + "_quantized"),
                              numpy_helper.from_array(np.array(ws, dtype=np.float32), b + "_scale"),
                              numpy_helper.from_array(np.array(0, dtype=np.int8), b + "_zero_point")])
        drop.add(b)
        x = n.input[0]
        p = n.name or ("MatMul_%d" % done)
        nodes += [
            helper.make_node("DynamicQuantizeLinear", [x], [x + "_quantized", x + "_scale", x + "_zero_point"],
                             name=p + "_dql"),
            helper.make_node("MatMulInteger", [x + "_quantized", b + "_quantized", x + "_zero_point",
                                               b + "_zero_point"], [p + "_int32"], name=p + "_mmi"),
            helper.make_node("Cast", [p + "_int32"], [p + "_cast"], to=TensorProto.FLOAT, name=p + "_cast"),
            helper.make_node("Mul", [x + "_scale", b + "_scale"], [p + "_scales"], name=p + "_scales_mul"),
            helper.make_node("Mul", [p + "_cast", p + "_scales"], [n.output[0]], name=p + "_output_scale_mul"),
        ]
        done += 1
    # an activation feeding several linears (Q, K, V) is quantized once, as ORT's quantizer does
    seen, uniq = set(), []
    for n in nodes:
        if n.op_type == "DynamicQuantizeLinear":
            if n.input[0] in seen:
                continue
            seen.add(n.input[0])
        uniq.append(n)
    del g.node[:]
    g.node.extend(uniq)
    keep = [t for t in g.initializer if t.name not in drop]
    del g.initializer[:]
    g.initializer.extend(keep)
    onnx.checker.check_model(m)
    onnx.save(m, dst)
    print("ort_quantize_dynamic: %d MatMuls quantized (int8 per-tensor weights, uint8 dynamic activations) -> %s"
          % (done, dst), file=sys.stderr)


if __name__ == "__main__":
    main()
