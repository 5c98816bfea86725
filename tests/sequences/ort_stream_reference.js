#!/usr/bin/env node
// ONNX Runtime reference for streaming models: runs every stream step by step at batch 1,
// carrying the state outputs into the next step's state inputs, as a client that keeps the
// state itself would.
// usage: NODE_PATH=.../node_modules node ort_stream_reference.js MODEL.onnx SPEC.json
// SPEC: {"streams": N, "steps": S,
//        "inputs": [{"name", "type": "float32"|"int64", "shape": [...], "file"}],   per-step
//                  tensors without the batch dim; file holds [N, S, ...shape] raw little-endian
//        "states": [{"input", "output", "shape": [...]}],   float32 zeros of `shape` at step 1
//        "outputs": [{"name", "file"}]}   written as [N, S, ...] float32 in stream-major order
const ort = require('onnxruntime-node');
const fs = require('fs');

const Types = {float32: Float32Array, int64: BigInt64Array};

(async () => {
  const [model, specFile] = process.argv.slice(2);
  const spec = JSON.parse(fs.readFileSync(specFile, 'utf8'));
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    executionMode: 'sequential',
  });
  const inputs = spec.inputs.map((inp) => {
    const buf = fs.readFileSync(inp.file);
    const T = Types[inp.type];
    const all = new T(buf.buffer, buf.byteOffset, buf.byteLength / T.BYTES_PER_ELEMENT);
    const per = inp.shape.reduce((a, b) => a * b, 1);
    return {...inp, all, per, T};
  });
  const outs = spec.outputs.map((o) => ({...o, chunks: []}));
  for (let s = 0; s < spec.streams; s++) {
    let state = spec.states.map((st) => {
      const n = st.shape.reduce((a, b) => a * b, 1);
      return new ort.Tensor('float32', new Float32Array(n), [1, ...st.shape]);
    });
    for (let t = 0; t < spec.steps; t++) {
      const feeds = {};
      for (const inp of inputs) {
        const off = (s * spec.steps + t) * inp.per;
        feeds[inp.name] = new ort.Tensor(inp.type, inp.all.slice(off, off + inp.per),
                                         [1, ...inp.shape]);
      }
      spec.states.forEach((st, i) => { feeds[st.input] = state[i]; });
      const r = await session.run(feeds);
      state = spec.states.map((st) => r[st.output]);
      for (const o of outs) o.chunks.push(Buffer.from(r[o.name].data.buffer.slice(
          r[o.name].data.byteOffset, r[o.name].data.byteOffset + r[o.name].data.byteLength)));
    }
  }
  for (const o of outs) fs.writeFileSync(o.file, Buffer.concat(o.chunks));
})().catch((e) => { console.error(`ort_stream_reference: ${e.stack || e}`); process.exit(1); });
