#!/usr/bin/python3
"""Issue 42's example streaming models, exported from PyTorch with random weights (fixed seed).

  vad      A voice-activity-style model as open-source VADs are built: a 1-D conv front end over
           a 512-sample chunk (16 kHz, 32 ms) making 8 frames, a 2-layer LSTM (hidden 64) over
           them whose h and c carry over between chunks, and a sigmoid speech probability.
             audio [B, 512], h_in [B, 2, 64], c_in [B, 2, 64] -> prob [B, 1], h_out, c_out
           (the states are batch-first so the server can keep one row per sequence).
  decoder  A tiny transformer decoder step (2 layers, d 32, 2 heads, ReLU FFN 64, vocabulary
           64) with a key/value cache that grows by one position per step along a symbolic
           length:
             token [B, 1] int64, past_k [B, 2, L, 32], past_v [B, 2, L, 32]
               -> logits [B, 64], present_k [B, 2, L+1, 32], present_v [B, 2, L+1, 32]
           A stream starts from a cache of one zero position (initial_state dims [2, 1, 32]).

Each model gets two configs: MODEL_state (sequence_batching: the server keeps the state) and
MODEL_client (dynamic batching only: the client sends and reads the state tensors), both over
the same ONNX file; decoder_capped is decoder_state with a state budget of 8 cache positions.

usage: make_streaming_models.py REPO_DIR [--max-batch N] [--strategy oldest|direct]
                                [--delay-us N] [--max-sequences N]
"""
import argparse
import os

import torch
from torch import nn

VAD_HIDDEN = 64
DEC_D, DEC_HEADS, DEC_LAYERS, DEC_VOCAB, DEC_FF = 32, 2, 2, 64, 64


class Vad(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 16, kernel_size=32, stride=16, padding=8)  # 512 -> 32
        self.conv2 = nn.Conv1d(16, 32, kernel_size=4, stride=4)  # 32 -> 8 frames
        self.lstm = nn.LSTM(32, VAD_HIDDEN, num_layers=2, batch_first=True)
        self.out = nn.Linear(VAD_HIDDEN, 1)

    def forward(self, audio, h_in, c_in):
        x = torch.relu(self.conv1(audio.unsqueeze(1)))
        x = torch.relu(self.conv2(x)).transpose(1, 2)  # [B, 8, 32]
        y, (h, c) = self.lstm(x, (h_in.transpose(0, 1).contiguous(),
                                  c_in.transpose(0, 1).contiguous()))
        prob = torch.sigmoid(self.out(y[:, -1]))
        return prob, h.transpose(0, 1), c.transpose(0, 1)


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DEC_D, 3 * DEC_D)
        self.proj = nn.Linear(DEC_D, DEC_D)
        self.ln1 = nn.LayerNorm(DEC_D)
        self.ff1 = nn.Linear(DEC_D, DEC_FF)
        self.ff2 = nn.Linear(DEC_FF, DEC_D)
        self.ln2 = nn.LayerNorm(DEC_D)

    def forward(self, x, past_k, past_v):  # x [B, 1, D], past [B, L, D]
        q, k, v = self.qkv(x).split(DEC_D, dim=-1)
        k_all = torch.cat([past_k, k], dim=1)
        v_all = torch.cat([past_v, v], dim=1)
        dh = DEC_D // DEC_HEADS

        def heads(t):  # [B, T, D] -> [B, H, T, dh]
            return t.reshape(t.shape[0], -1, DEC_HEADS, dh).transpose(1, 2)

        scores = torch.matmul(heads(q), heads(k_all).transpose(2, 3)) * (1.0 / dh ** 0.5)
        att = torch.matmul(torch.softmax(scores, dim=-1), heads(v_all))  # [B, H, 1, dh]
        att = att.transpose(1, 2).reshape(x.shape[0], 1, DEC_D)
        x = self.ln1(x + self.proj(att))
        x = self.ln2(x + self.ff2(torch.relu(self.ff1(x))))
        return x, k_all, v_all


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(DEC_VOCAB, DEC_D)
        self.layers = nn.ModuleList([DecoderLayer() for _ in range(DEC_LAYERS)])
        self.head = nn.Linear(DEC_D, DEC_VOCAB)

    def forward(self, token, past_k, past_v):
        x = self.embed(token)  # [B, 1, D]
        ks, vs = [], []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, past_k[:, i], past_v[:, i])
            ks.append(k)
            vs.append(v)
        return self.head(x[:, 0]), torch.stack(ks, dim=1), torch.stack(vs, dim=1)


def export(model, args, path, inputs, outputs, dynamic):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.onnx.export(model, args, path, input_names=inputs, output_names=outputs,
                      dynamic_axes=dynamic, opset_version=13, do_constant_folding=True)


def write_config(repo, name, onnx_path, text):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    dst = os.path.join(repo, name, "1", "model.onnx")
    if not os.path.exists(dst):
        os.link(onnx_path, dst)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("repo")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--strategy", choices=["oldest", "direct"], default="oldest")
    ap.add_argument("--delay-us", type=int, default=500)
    ap.add_argument("--max-sequences", type=int, default=4096)
    ap.add_argument("--idle-us", type=int, default=600000000)
    a = ap.parse_args()
    torch.manual_seed(42)
    src = os.path.join(a.repo, ".onnx")
    vad_path, dec_path = os.path.join(src, "vad.onnx"), os.path.join(src, "decoder.onnx")
    with torch.no_grad():
        vad = Vad().eval()
        export(vad, (torch.randn(2, 512), torch.zeros(2, 2, VAD_HIDDEN),
                     torch.zeros(2, 2, VAD_HIDDEN)), vad_path,
               ["audio", "h_in", "c_in"], ["prob", "h_out", "c_out"],
               {n: {0: "batch"} for n in ["audio", "h_in", "c_in", "prob", "h_out", "c_out"]})
        dec = Decoder().eval()
        dynamic = {"token": {0: "batch"}, "logits": {0: "batch"},
                   "past_k": {0: "batch", 2: "past"}, "past_v": {0: "batch", 2: "past"},
                   "present_k": {0: "batch", 2: "present"},
                   "present_v": {0: "batch", 2: "present"}}
        export(dec, (torch.zeros(2, 1, dtype=torch.int64), torch.zeros(2, DEC_LAYERS, 3, DEC_D),
                     torch.zeros(2, DEC_LAYERS, 3, DEC_D)), dec_path,
               ["token", "past_k", "past_v"], ["logits", "present_k", "present_v"], dynamic)

    if a.strategy == "oldest":
        strategy = (f"oldest {{ max_candidate_sequences: {a.max_sequences} "
                    f"preferred_batch_size: [ {a.max_batch} ] "
                    f"max_queue_delay_microseconds: {a.delay_us} }}")
    else:
        strategy = f"direct {{ max_queue_delay_microseconds: {a.delay_us} }}"
    # oldest waits out its queue delay to gather a batch even when the model is idle (strict);
    # direct runs a step at once, on the thread that received it when the model is idle.
    common = (f'parameters {{ key: "cuvil_max_sequences" value {{ string_value: '
              f'"{a.max_sequences}" }} }}\n')
    if a.strategy == "oldest":
        common += 'parameters { key: "cuvil_strict_queue_delay" value { string_value: "true" } }\n'

    write_config(a.repo, "vad_state", vad_path, f"""
max_batch_size: {a.max_batch}
sequence_batching {{
  max_sequence_idle_microseconds: {a.idle_us}
  state [ {{ input_name: "h_in" output_name: "h_out" data_type: TYPE_FP32 dims: [ 2, {VAD_HIDDEN} ] }},
          {{ input_name: "c_in" output_name: "c_out" data_type: TYPE_FP32 dims: [ 2, {VAD_HIDDEN} ] }} ]
  {strategy}
}}
{common}""")
    # The client-carried copies ask for batch-invariant kernels, which the _state models get by
    # default (sequence_batching): both then compute each row in one order whatever the batch.
    write_config(a.repo, "vad_client", vad_path, f"""
max_batch_size: {a.max_batch}
dynamic_batching {{ max_queue_delay_microseconds: {a.delay_us} }}
parameters {{ key: "cuvil_batch_invariant" value {{ string_value: "true" }} }}
""")
    write_config(a.repo, "decoder_state", dec_path, f"""
max_batch_size: {a.max_batch}
sequence_batching {{
  max_sequence_idle_microseconds: {a.idle_us}
  state [ {{ input_name: "past_k" output_name: "present_k" data_type: TYPE_FP32
            dims: [ {DEC_LAYERS}, -1, {DEC_D} ]
            initial_state {{ data_type: TYPE_FP32 dims: [ {DEC_LAYERS}, 1, {DEC_D} ] zero_data: true name: "empty" }} }},
          {{ input_name: "past_v" output_name: "present_v" data_type: TYPE_FP32
            dims: [ {DEC_LAYERS}, -1, {DEC_D} ]
            initial_state {{ data_type: TYPE_FP32 dims: [ {DEC_LAYERS}, 1, {DEC_D} ] zero_data: true name: "empty" }} }} ]
  {strategy}
}}
{common}""")
    # The cache's maximum: a state budget of 8 positions (2 tensors x 2 layers x 32 floats =
    # 512 bytes each) for the whole model; a step that would grow a cache past it is refused.
    write_config(a.repo, "decoder_capped", dec_path, f"""
max_batch_size: {a.max_batch}
sequence_batching {{
  max_sequence_idle_microseconds: {a.idle_us}
  state [ {{ input_name: "past_k" output_name: "present_k" data_type: TYPE_FP32
            dims: [ {DEC_LAYERS}, -1, {DEC_D} ]
            initial_state {{ data_type: TYPE_FP32 dims: [ {DEC_LAYERS}, 1, {DEC_D} ] zero_data: true name: "empty" }} }},
          {{ input_name: "past_v" output_name: "present_v" data_type: TYPE_FP32
            dims: [ {DEC_LAYERS}, -1, {DEC_D} ]
            initial_state {{ data_type: TYPE_FP32 dims: [ {DEC_LAYERS}, 1, {DEC_D} ] zero_data: true name: "empty" }} }} ]
}}
parameters {{ key: "cuvil_max_sequence_state_bytes" value {{ string_value: "{8 * 2 * DEC_LAYERS * DEC_D * 4}" }} }}
""")
    write_config(a.repo, "decoder_client", dec_path, f"""
max_batch_size: {a.max_batch}
dynamic_batching {{ max_queue_delay_microseconds: {a.delay_us} }}
parameters {{ key: "cuvil_batch_invariant" value {{ string_value: "true" }} }}
""")
    print(f"models written to {a.repo}: vad_state vad_client decoder_state decoder_client "
          "decoder_capped")


if __name__ == "__main__":
    main()
