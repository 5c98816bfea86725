#!/usr/bin/env node
// Times ONNX Runtime (CPU EP) on one model with given input shapes: ../shared/bench/ort's runner
// gives every symbolic dim the batch, which cannot time a model with free H and W. Same output
// line and options, plus --shape NAME=D0,D1,... (repeatable) for the inputs it names; the other
// inputs' symbolic dims take the batch.
// usage: bench/ort_shapes.sh MODEL.onnx [--batch B] [--threads T] [--min-time S] [--warmup N]
//                            [--shape NAME=D0,D1,...]...
const ort = require('onnxruntime-node');
const path = require('path');

const args = process.argv.slice(2);
const model = args[0];
const opts = { batch: 1, threads: 1, 'min-time': 3, warmup: 5 };
const shapes = {};
try {
  for (let i = 1; i < args.length; i++) {
    const key = args[i].replace(/^--/, '');
    const value = args[i + 1];
    if (value === undefined) throw new Error(`missing value after ${args[i]}`);
    i++;
    if (key === 'shape') {
      const eq = value.lastIndexOf('=');
      const list = value.slice(eq + 1);
      const parts = list === '' ? [] : list.split(',');  // NAME= : a scalar
      const dims = parts.map(Number);
      if (eq <= 0 || parts.some((d) => !/^[0-9]+$/.test(d))) {
        throw new Error(`--shape wants NAME=D0,D1,... (got '${value}')`);
      }
      shapes[value.slice(0, eq)] = dims;
    } else if (key in opts) {
      opts[key] = Number(value);
    } else {
      throw new Error(`unexpected argument ${args[i - 1]}`);
    }
  }
} catch (e) {
  console.error(`ort-shapes: ${e.message}`);
  process.exit(2);
}

const makers = {
  float32: (n) => Float32Array.from({ length: n }, () => Math.random() * 2 - 1),
  int64: (n) => BigInt64Array.from({ length: n }, () => 1n),
  int32: (n) => Int32Array.from({ length: n }, () => 1),
  uint8: (n) => Uint8Array.from({ length: n }, () => (Math.random() * 255) | 0),
  int8: (n) => Int8Array.from({ length: n }, () => ((Math.random() * 255) | 0) - 128),
  bool: (n) => Uint8Array.from({ length: n }, () => 1),
};

(async () => {
  if (!model || model.startsWith('--')) throw new Error('usage: ort-shapes.js MODEL.onnx [options]');
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: opts.threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    executionMode: 'sequential',
  });
  const createMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const feeds = {};
  let batch = opts.batch;
  for (const meta of session.inputMetadata) {
    let dims = shapes[meta.name];
    if (dims) {
      if (dims.length > 0 && typeof meta.shape[0] !== 'number') batch = dims[0];
      delete shapes[meta.name];
    } else {
      dims = meta.shape.map((d) => (typeof d === 'number' && d > 0 ? d : opts.batch));
    }
    const n = dims.reduce((a, b) => a * b, 1);
    if (!makers[meta.type]) throw new Error(`input ${meta.name}: dtype ${meta.type} not handled`);
    feeds[meta.name] = new ort.Tensor(meta.type, makers[meta.type](n), dims);
  }
  const unknown = Object.keys(shapes);
  if (unknown.length) throw new Error(`--shape names '${unknown[0]}', which is not an input`);
  for (let i = 0; i < opts.warmup; i++) await session.run(feeds);
  const times = [];
  const start = process.hrtime.bigint();
  while (times.length < 10 || Number(process.hrtime.bigint() - start) / 1e9 < opts['min-time']) {
    const a = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - a) / 1e6);
  }
  times.sort((x, y) => x - y);
  const q = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))];
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  const name = `${path.basename(path.dirname(path.resolve(model)))}/${path.basename(model)}`;
  console.log(`ort model=${name} batch=${batch} threads=${opts.threads} ` +
    `median_ms=${q(0.5).toFixed(4)} p99_ms=${q(0.99).toFixed(4)} mean_ms=${mean.toFixed(4)} ` +
    `runs=${times.length} create_ms=${createMs.toFixed(1)}`);
})().catch((e) => { console.error(`ort-shapes: ${e.message}`); process.exit(1); });
