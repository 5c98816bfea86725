"""Writes a keyword-spotting DS-CNN in the ONNX backend-test layout, for the cortex-m7 tests:
OUT/model.onnx (opset 13, batch dim symbolic, named `batch`) and OUT/test_data_set_{0,1,2}/
input_0.pb, output_0.pb (batch 1 each; the outputs from PyTorch eager fp32).

The network is the small DS-CNN of keyword spotting on microcontrollers: a 49x10 MFCC input
(49 frames of 10 coefficients), a 10x4 convolution with stride 2 to 64 channels, four
depthwise-separable blocks (3x3 depthwise + 1x1 pointwise, each with batch norm and ReLU),
global average pooling and a 12-class classifier: 22,604 parameters once batch norm is folded
into the convolutions. Weights, batch-norm statistics and inputs are random with a fixed seed.

usage: /usr/bin/python3 make_dscnn.py OUT_DIR"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn


class DsCnn(nn.Module):
    """DS-CNN: conv 10x4/2 -> 4 x (depthwise 3x3, pointwise 1x1) -> average pool -> linear."""

    def __init__(self, channels=64, blocks=4, classes=12):
        super().__init__()
        layers = [nn.Conv2d(1, channels, (10, 4), stride=2, padding=(5, 1), bias=False),
                  nn.BatchNorm2d(channels), nn.ReLU()]
        for _ in range(blocks):
            layers += [nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False),
                       nn.BatchNorm2d(channels), nn.ReLU(),
                       nn.Conv2d(channels, channels, 1, bias=False),
                       nn.BatchNorm2d(channels), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def main():
    out = sys.argv[1]
    torch.manual_seed(44)
    model = DsCnn()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    model.eval()
    os.makedirs(out, exist_ok=True)
    example = torch.randn(1, 1, 49, 10)
    torch.onnx.export(model, example, os.path.join(out, "model.onnx"), opset_version=13,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    exported = onnx.load(os.path.join(out, "model.onnx"))
    params = sum(int(np.prod(t.dims)) for t in exported.graph.initializer)
    for s in range(3):
        x = torch.randn(1, 1, 49, 10) * (1.0 + 0.25 * s)
        with torch.no_grad():
            y = model(x)
        d = os.path.join(out, f"test_data_set_{s}")
        os.makedirs(d, exist_ok=True)
        for name, value in (("input_0", x), ("output_0", y)):
            tensor = numpy_helper.from_array(value.numpy(), name.split("_")[0])
            with open(os.path.join(d, name + ".pb"), "wb") as f:
                f.write(tensor.SerializeToString())
    print(f"dscnn: {params} parameters in {os.path.join(out, 'model.onnx')}")


if __name__ == "__main__":
    main()
