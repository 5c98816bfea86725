"""Facts about an ONNX model for the cortex-m7 int8 test, one per line on stdout:
   input NAME        (each graph input that is not an initializer, in order)
   step SCALE        (the scale of the last QuantizeLinear: one quantisation step of the last
                      quantized activation; absent in a model without QuantizeLinear)
usage: /usr/bin/python3 model_facts.py MODEL.onnx"""
import sys

import onnx
from onnx import numpy_helper


def main():
    model = onnx.load(sys.argv[1], load_external_data=False)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    for value in graph.input:
        if value.name not in inits:
            print("input", value.name)
    constants = {n.output[0]: n for n in graph.node if n.op_type == "Constant"}
    step = None
    for node in graph.node:
        if node.op_type != "QuantizeLinear":
            continue
        scale = node.input[1]
        if scale in inits:
            step = float(numpy_helper.to_array(inits[scale]).max())
        elif scale in constants:
            step = float(numpy_helper.to_array(constants[scale].attribute[0].t).max())
    if step is not None:
        print("step", repr(step))


if __name__ == "__main__":
    main()
